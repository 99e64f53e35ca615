//! A Q8_0 matrix product that reads each weight block once for a whole tile of input rows.
//!
//! candle's quantized product computes one dot product per (input row, weight row) pair,
//! so a batch of 8 decode rows costs 8 times one row: batching sequences would not raise
//! throughput. Here the weights are laid out as `i8` quants plus `f32` scales (converted
//! once at load, no per-block half-float conversion), the input rows are quantized to the
//! same blocks, and an AVX2 kernel walks each weight row once while accumulating up to 8
//! input rows in independent registers. Work is split across threads by weight rows.
//!
//! The arithmetic is that of candle's AVX2 `q8_0 x q8_0` dot product (inputs quantized per
//! block of 32 with an f16 scale; per block `d_w * d_x * sum(q_w * q_x)` fused-multiply-
//! added into 8 `f32` lanes, then the same horizontal sum). Each (weight row, input row)
//! pair goes through the same sequence of operations whatever the batch: a row's result
//! does not depend on how many rows are computed with it, so batching never changes an
//! output (`a_row_gives_the_same_bits_in_any_batch`). The runtime uses this kernel for a
//! single decode row too: candle's own single-row path is not the same arithmetic on every
//! CPU (with AVX-512 VNNI it quantizes some inputs per 256 values). For one or two input
//! rows the kernel walks 4 weight rows at once, so that independent accumulators hide the
//! multiply-add latency. Without AVX2 (or on other architectures) a scalar loop computes
//! the same sums (to rounding).

/// Values per block.
pub const QK: usize = 32;
/// Input rows one pass over the weights serves.
const TILE: usize = 8;
/// Weight rows per parallel task.
const ROWS_PER_TASK: usize = 32;

/// A Q8_0 weight matrix (`n` rows of `k` values) in kernel layout.
#[derive(Debug, Clone)]
pub struct Q8Matrix {
    n: usize,
    kb: usize,
    d: Vec<f32>,
    q: Vec<i8>,
}

fn f16_to_f32(bits: u16) -> f32 {
    let sign = ((bits >> 15) as u32) << 31;
    let exp = ((bits >> 10) & 0x1f) as u32;
    let man = (bits & 0x3ff) as u32;
    let v = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: renormalize.
            let mut e = 127 - 15 + 1;
            let mut m = m;
            while m & 0x400 == 0 {
                m <<= 1;
                e -= 1;
            }
            sign | ((e as u32) << 23) | ((m & 0x3ff) << 13)
        }
        (31, 0) => sign | 0x7f80_0000,
        (31, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(v)
}

impl Q8Matrix {
    /// From ggml `block_q8_0` bytes (per block: an f16 scale, then 32 `i8`), `n` rows of
    /// `k` values. `None` when the sizes do not match. Cost: one pass over the bytes.
    pub fn from_ggml(bytes: &[u8], n: usize, k: usize) -> Option<Q8Matrix> {
        if !k.is_multiple_of(QK) || bytes.len() != n * (k / QK) * 34 {
            return None;
        }
        let kb = k / QK;
        let mut d = Vec::with_capacity(n * kb);
        let mut q = Vec::with_capacity(n * k);
        for blk in bytes.chunks_exact(34) {
            d.push(f16_to_f32(u16::from_le_bytes([blk[0], blk[1]])));
            q.extend(blk[2..].iter().map(|&b| b as i8));
        }
        Some(Q8Matrix { n, kb, d, q })
    }

    /// Output size (weight rows).
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Input size.
    pub fn cols(&self) -> usize {
        self.kb * QK
    }

    /// `y = x · Wᵀ` for `m` input rows of `k` values (row-major); `y` is `m × n`.
    /// Cost: `m·n·k` multiply-adds, the weights read once per tile of 8 rows.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        let k = self.cols();
        assert_eq!(x.len(), m * k, "input of the wrong size");
        // Quantize the inputs to blocks, as ggml does (scale = amax / 127).
        let mut xd = vec![0f32; m * self.kb];
        let mut xq = vec![0i8; m * k];
        for (b, (chunk, qs)) in x.chunks_exact(QK).zip(xq.chunks_exact_mut(QK)).enumerate() {
            let amax = chunk.iter().fold(0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            for (q, v) in qs.iter_mut().zip(chunk) {
                *q = (v * id).round() as i8;
            }
            // The scale is kept as f16, exactly as candle's (and ggml's) `block_q8_0`
            // keeps it, so that products match candle's AVX2 `q8_0` path bit for bit.
            xd[b] = half::f16::from_f32(d).to_f32();
        }
        let mut y = vec![0f32; m * self.n];
        let out = SendPtr(y.as_mut_ptr());
        let tasks = self.n.div_ceil(ROWS_PER_TASK);
        for t0 in (0..m).step_by(TILE) {
            let r = TILE.min(m - t0);
            let xq = &xq[t0 * k..(t0 + r) * k];
            let xd = &xd[t0 * self.kb..(t0 + r) * self.kb];
            // candle's own worker pool, not rayon's: between candle's operations its
            // workers spin for a while, and a second pool's threads would compete with them
            // for the cores (a single-row product ran 30% slower on 2 cores that way).
            candle_core::utils::barrier_pool().execute_chunked(tasks, |range| {
                for task in range {
                    self.task(task, xq, xd, r, t0, &out);
                }
            });
        }
        y
    }

    /// Output columns `task * ROWS_PER_TASK ..` (one weight row group after another) for
    /// input rows `t0 .. t0 + r`.
    fn task(&self, task: usize, xq: &[i8], xd: &[f32], r: usize, t0: usize, out: &SendPtr) {
        let j0 = task * ROWS_PER_TASK;
        let j1 = self.n.min(j0 + ROWS_PER_TASK);
        let mut acc = [[0f32; TILE]; GROUP];
        let g = group(r);
        let mut j = j0;
        while j < j1 {
            // A whole group of weight rows, or single rows at the end.
            let jn = if j + g <= j1 { g } else { 1 };
            self.dot_rows(j, jn, xq, xd, r, &mut acc);
            for (jj, row) in acc.iter().enumerate().take(jn) {
                for (t, a) in row.iter().enumerate().take(r) {
                    // SAFETY: each (row t0 + t, column j + jj) is written by exactly one
                    // task (tasks own disjoint column ranges), within `m * n`.
                    unsafe { *out.0.add((t0 + t) * self.n + j + jj) = *a };
                }
            }
            j += jn;
        }
    }

    /// Dot products of the `jn` weight rows from `j` (1 or [`group`]`(r)`) with the `r`
    /// quantized input rows, into `out[row][input]`.
    fn dot_rows(
        &self,
        j: usize,
        jn: usize,
        xq: &[i8],
        xd: &[f32],
        r: usize,
        out: &mut [[f32; TILE]; GROUP],
    ) {
        let row = self.kb * QK;
        let wq = &self.q[j * row..(j + jn) * row];
        let wd = &self.d[j * self.kb..(j + jn) * self.kb];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                // SAFETY: the features are present; `wq` holds `jn` rows of `kb * QK`
                // quants, `xq` `r` rows, and `jn`, `r` are a pair `dot_rows` supports.
                unsafe { avx2::dot_rows(wq, wd, xq, xd, self.kb, jn, r, out) };
                return;
            }
        }
        for (jj, o) in out.iter_mut().enumerate().take(jn) {
            scalar_dot_tile(
                &wq[jj * row..(jj + 1) * row],
                &wd[jj * self.kb..(jj + 1) * self.kb],
                xq,
                xd,
                self.kb,
                r,
                o,
            );
        }
    }
}

/// Most weight rows one call of the kernel walks together.
const GROUP: usize = 4;

/// Weight rows walked together for `r` input rows: enough independent accumulators to
/// hide the multiply-add latency (a single decode row would otherwise wait on one chain),
/// few enough to stay in registers. Each (weight row, input row) pair is computed by the
/// same sequence of operations whatever the group, so results never depend on it.
fn group(r: usize) -> usize {
    match r {
        1 | 2 => 4,
        3 | 4 => 2,
        _ => 1,
    }
}

struct SendPtr(*mut f32);
// SAFETY: the pointer is only written at disjoint positions (see `matmul`).
unsafe impl Sync for SendPtr {}
unsafe impl Send for SendPtr {}

fn scalar_dot_tile(
    wq: &[i8],
    wd: &[f32],
    xq: &[i8],
    xd: &[f32],
    kb: usize,
    r: usize,
    acc: &mut [f32; TILE],
) {
    for (t, a) in acc.iter_mut().enumerate().take(r) {
        let mut s = 0f32;
        for b in 0..kb {
            let w = &wq[b * QK..(b + 1) * QK];
            let x = &xq[(t * kb + b) * QK..(t * kb + b + 1) * QK];
            let dot: i32 = w.iter().zip(x).map(|(&p, &q)| p as i32 * q as i32).sum();
            s += wd[b] * xd[t * kb + b] * dot as f32;
        }
        *a = s;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{QK, TILE};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// `J` weight rows (at `wp`, `kb` blocks each) against `R` input rows: per pair, per
    /// block, `d_w * d_x * sum(q_w * q_x)` fused-multiply-added into 8 lanes, then
    /// [`hsum`]. The constants let the accumulators live in registers.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; `wp` points at `J * kb * QK` quants, `wd` at
    /// `J * kb` scales, `xp` at `R * kb * QK` quants, `xd` at `R * kb` scales.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const J: usize, const R: usize>(
        wp: *const i8,
        wd: *const f32,
        xp: *const i8,
        xd: *const f32,
        kb: usize,
        out: &mut [[f32; TILE]; super::GROUP],
    ) {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); R]; J];
        for b in 0..kb {
            for (jj, accs) in acc.iter_mut().enumerate() {
                let w = _mm256_loadu_si256(wp.add((jj * kb + b) * QK) as *const __m256i);
                let aw = _mm256_sign_epi8(w, w);
                let dw = *wd.add(jj * kb + b);
                for (t, a) in accs.iter_mut().enumerate() {
                    let x = _mm256_loadu_si256(xp.add((t * kb + b) * QK) as *const __m256i);
                    let sx = _mm256_sign_epi8(x, w);
                    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
                    let d = _mm256_set1_ps(dw * *xd.add(t * kb + b));
                    *a = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), *a);
                }
            }
        }
        for (o, accs) in out.iter_mut().zip(&acc) {
            for (v, a) in o.iter_mut().zip(accs) {
                *v = hsum(*a);
            }
        }
    }

    /// See [`super::Q8Matrix::dot_rows`].
    ///
    /// # Safety
    /// AVX2 and FMA must be available; `wq` holds `jn * kb * QK` quants, `xq`
    /// `r * kb * QK`, `wd` `jn * kb` scales, `xd` `r * kb`; `jn` is 1 or
    /// `super::group(r)` and `1 <= r <= TILE`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_rows(
        wq: &[i8],
        wd: &[f32],
        xq: &[i8],
        xd: &[f32],
        kb: usize,
        jn: usize,
        r: usize,
        out: &mut [[f32; TILE]; super::GROUP],
    ) {
        debug_assert!(r <= TILE && wq.len() == jn * kb * QK && xq.len() >= r * kb * QK);
        debug_assert!(jn == 1 || jn == super::group(r));
        let (w, d, x, e) = (wq.as_ptr(), wd.as_ptr(), xq.as_ptr(), xd.as_ptr());
        match (jn, r) {
            (4, 1) => tile::<4, 1>(w, d, x, e, kb, out),
            (4, 2) => tile::<4, 2>(w, d, x, e, kb, out),
            (2, 3) => tile::<2, 3>(w, d, x, e, kb, out),
            (2, 4) => tile::<2, 4>(w, d, x, e, kb, out),
            (_, 1) => tile::<1, 1>(w, d, x, e, kb, out),
            (_, 2) => tile::<1, 2>(w, d, x, e, kb, out),
            (_, 3) => tile::<1, 3>(w, d, x, e, kb, out),
            (_, 4) => tile::<1, 4>(w, d, x, e, kb, out),
            (_, 5) => tile::<1, 5>(w, d, x, e, kb, out),
            (_, 6) => tile::<1, 6>(w, d, x, e, kb, out),
            (_, 7) => tile::<1, 7>(w, d, x, e, kb, out),
            _ => tile::<1, 8>(w, d, x, e, kb, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_to_f16_bits(x: f32) -> u16 {
        // Enough for the test's scales (normal numbers, truncating).
        let b = x.to_bits();
        let sign = ((b >> 16) & 0x8000) as u16;
        let e = ((b >> 23) & 0xff) as i32 - 127 + 15;
        let m = ((b >> 13) & 0x3ff) as u16;
        sign | ((e as u16) << 10) | m
    }

    #[test]
    fn matches_a_plain_reference() {
        let (n, k) = (37, 96);
        let mut bytes = Vec::new();
        let mut w = vec![0f32; n * k];
        let mut seed = 7u32;
        let mut rnd = || {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (seed >> 16) as i32 % 255 - 127
        };
        for j in 0..n {
            for b in 0..k / QK {
                let bits = f32_to_f16_bits(0.01 * (1 + (j + b) % 5) as f32);
                let d = f16_to_f32(bits);
                bytes.extend_from_slice(&bits.to_le_bytes());
                for i in 0..QK {
                    let q = rnd().clamp(-128, 127) as i8;
                    bytes.push(q as u8);
                    w[j * k + b * QK + i] = d * q as f32;
                }
            }
        }
        let mat = Q8Matrix::from_ggml(&bytes, n, k).unwrap();
        for m in [1, 3, 8, 11] {
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
                .collect();
            let y = mat.matmul(&x, m);
            for r in 0..m {
                for j in 0..n {
                    // The same arithmetic done plainly: inputs quantized per block of 32
                    // (scale amax / 127), integer dot products, scaled sums.
                    let mut want = 0f32;
                    let mut bound = 0f32;
                    for b in 0..k / QK {
                        let xs = &x[r * k + b * QK..r * k + (b + 1) * QK];
                        let d = xs.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
                        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
                        let d16 = half::f16::from_f32(d).to_f32();
                        let mut dot = 0i32;
                        for i in 0..QK {
                            let q = (xs[i] * id).round() as i32;
                            dot += q * bytes[(j * (k / QK) + b) * 34 + 2 + i] as i8 as i32;
                            bound += w[j * k + b * QK + i].abs() * d / 2.0;
                        }
                        let dw = f16_to_f32(u16::from_le_bytes([
                            bytes[(j * (k / QK) + b) * 34],
                            bytes[(j * (k / QK) + b) * 34 + 1],
                        ]));
                        want += dw * d16 * dot as f32;
                    }
                    let got = y[r * n + j];
                    assert!(
                        (want - got).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{m} {r} {j}: {want} vs {got}"
                    );
                    // And within the input quantization error of the exact product.
                    let exact: f32 = (0..k).map(|i| x[r * k + i] * w[j * k + i]).sum();
                    assert!(
                        (exact - got).abs() <= bound + 1e-3,
                        "{exact} vs {got}, bound {bound}"
                    );
                }
            }
        }
        assert!(Q8Matrix::from_ggml(&bytes[1..], n, k).is_none());
    }

    #[test]
    fn scalar_and_simd_paths_agree() {
        let kb = 5;
        let jn = GROUP;
        let wq: Vec<i8> = (0..jn * kb * QK)
            .map(|i| ((i * 73 % 256) as i32 - 128) as i8)
            .collect();
        let wd: Vec<f32> = (0..jn * kb).map(|b| 0.01 + b as f32 * 0.003).collect();
        let xq: Vec<i8> = (0..TILE * kb * QK)
            .map(|i| ((i * 31 % 255) as i32 - 127) as i8)
            .collect();
        let xd: Vec<f32> = (0..TILE * kb).map(|b| 0.02 + b as f32 * 0.001).collect();
        let row = kb * QK;
        for r in 1..=TILE {
            let mut a = [[0f32; TILE]; GROUP];
            for (jj, o) in a.iter_mut().enumerate() {
                let (w, d) = (&wq[jj * row..(jj + 1) * row], &wd[jj * kb..(jj + 1) * kb]);
                scalar_dot_tile(w, d, &xq, &xd, kb, r, o);
            }
            assert!(a[0][..r].iter().any(|v| *v != 0.0));
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                // Grouped and single weight rows give the same bits; both agree with the
                // scalar loop to rounding.
                let g = group(r);
                let mut grouped = [[0f32; TILE]; GROUP];
                // SAFETY: features checked; sizes as documented.
                unsafe {
                    avx2::dot_rows(
                        &wq[..g * row],
                        &wd[..g * kb],
                        &xq,
                        &xd,
                        kb,
                        g,
                        r,
                        &mut grouped,
                    )
                };
                for jj in 0..GROUP {
                    let mut one = [[0f32; TILE]; GROUP];
                    let (w, d) = (&wq[jj * row..(jj + 1) * row], &wd[jj * kb..(jj + 1) * kb]);
                    // SAFETY: as above.
                    unsafe { avx2::dot_rows(w, d, &xq, &xd, kb, 1, r, &mut one) };
                    for t in 0..r {
                        if jj < g {
                            assert_eq!(grouped[jj][t].to_bits(), one[0][t].to_bits());
                        }
                        let want = a[jj][t];
                        assert!(
                            (want - one[0][t]).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{r} {jj} {t}: {want} vs {}",
                            one[0][t]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_row_gives_the_same_bits_in_any_batch() {
        // The property batching relies on: a row's product does not depend on how many
        // rows are computed with it, or where in the batch it sits.
        let (n, k) = (70, 128);
        let mut bytes = Vec::new();
        for j in 0..n * k / QK {
            bytes.extend_from_slice(&f32_to_f16_bits(0.01 * (1 + j % 7) as f32).to_le_bytes());
            bytes.extend((0..QK).map(|i| ((j * 31 + i * 17) % 255) as u8));
        }
        let mat = Q8Matrix::from_ggml(&bytes, n, k).unwrap();
        let x: Vec<f32> = (0..11 * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let alone: Vec<Vec<f32>> = (0..11)
            .map(|r| mat.matmul(&x[r * k..(r + 1) * k], 1))
            .collect();
        for m in 1..=11 {
            let y = mat.matmul(&x[..m * k], m);
            for (r, want) in alone.iter().enumerate().take(m) {
                for j in 0..n {
                    assert_eq!(y[r * n + j].to_bits(), want[j].to_bits(), "{m} {r} {j}");
                }
            }
        }
    }

    #[test]
    fn half_floats_decode() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0), 0.0);
    }
}
