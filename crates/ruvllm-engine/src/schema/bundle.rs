//! References across documents: base URIs, anchors, a registry of schemas, and dynamic
//! references, resolved before compiling into **one document whose references are all
//! JSON pointers into itself**.
//!
//! # Design
//!
//! The compiler works on one document and references of the form `#/json/pointer` (a rule
//! per target, so recursion needs no unrolling). Everything else JSON Schema allows is
//! brought to that form here, once, before compiling:
//!
//! * Every sub-schema gets its **base URI**: the document's (the URI it was registered
//!   under, or `ruvllm:///root.json` for the schema being compiled), changed by each `$id`
//!   (`id` in draft 4) on the way down, as RFC 3986 resolves references. Each `$id` starts a
//!   **resource**; `$anchor`, `$dynamicAnchor` and draft 6/7's `$id: "#name"` name
//!   locations in their resource.
//! * A `$ref` is resolved against its base URI to an absolute URI: a resource and a JSON
//!   pointer or anchor inside it. A resource not in the document is looked up in the
//!   [`SchemaRegistry`] the caller gives (a folder of schemas by their `$id`, or
//!   URI-to-file pairs), which also holds the official meta-schemas of every draft; nothing
//!   is ever fetched over the network, and an unresolved reference is an error naming its
//!   URI and the JSON pointer where it is.
//! * Documents from the registry are copied under the key [`DOCS_KEY`] of the bundle,
//!   every `$ref` becomes `#` plus the pointer of its target in the bundle, and the
//!   identifiers (`$id`, anchors) are removed: the bundle means what the documents meant,
//!   and the compiler and the semantic checks' validator read it without any URI.
//! * **Dynamic references** (`$dynamicRef` of 2020-12, `$recursiveRef` of 2019-09) depend
//!   on the dynamic scope: the resources evaluation passed through, and the outermost of
//!   them that declares the anchor wins. What matters of a scope is therefore, for each
//!   anchor name, the first resource entered that declares it. Where the answer is the
//!   same on every path (the root declares the anchor, as the meta-schemas and
//!   "extensible" schemas do; or one resource alone does; or the initial target declares
//!   none) the reference is a plain `$ref`. Otherwise the bundle is made of **copies**:
//!   each sub-schema a reference reaches is placed once per scope it is reached in (the
//!   names bound so far), and a dynamic reference inside a copy resolves by that copy's
//!   scope. Scopes only grow (a name, once bound, stays bound), so the copies are finite;
//!   more than 256 are refused with the keyword and pointer.
//! * A document of **another draft** keeps its meaning: it is walked with its own
//!   keywords (`id` or `$id`, `$ref` overriding siblings or not) and each sub-schema is
//!   rewritten in the root's (see `drafts`).
//!
//! Limits: a document nested deeper than 256 levels is not walked further (the compiler's
//! depth limit refuses it anyway); sub-schemas under unknown keywords are not resources (as
//! the specification says), but a pointer into one is followed.
//!
//! Part of the schema front end (the parent module). Owns: `SchemaRegistry` and one
//! bundle's documents. Uses: the parent's pointers and drafts.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};
use url::Url;

use super::tree::{child_mut, children};
use super::{join, percent_decode, SchemaError};

/// The key of the bundle under which the registry's documents are copied (an unknown
/// keyword: an annotation to every validator).
pub const DOCS_KEY: &str = "$ruvllm-documents";

/// The base URI of a schema without `$id`.
pub const DEFAULT_BASE: &str = "ruvllm:///root.json";

/// Most nesting walked.
const MAX_DEPTH: usize = 256;

/// Schemas that `$ref`s may name besides the document being compiled, by absolute URI.
/// Nothing is fetched: a reference resolves to the document itself or to one registered
/// here. Cheap to clone behind an `Arc` (what [`super::SchemaOptions::registry`] holds).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SchemaRegistry {
    docs: BTreeMap<String, Value>,
}

/// Why a registry cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A URI that is not absolute.
    #[error("schema registry: {uri:?} is not an absolute URI: {reason}")]
    BadUri {
        /// The URI.
        uri: String,
        /// What the URI parser said.
        reason: String,
    },
    /// A schema with neither a given URI nor an `$id`.
    #[error("schema registry: {file} has no `$id` (give it a URI: URI=FILE)")]
    NoId {
        /// The file.
        file: String,
    },
    /// A file that cannot be read or is not JSON.
    #[error("schema registry: {file}: {reason}")]
    File {
        /// The file.
        file: String,
        /// The I/O or JSON error.
        reason: String,
    },
}

fn absolute(uri: &str) -> Result<Url, RegistryError> {
    let mut u = Url::parse(uri).map_err(|e| RegistryError::BadUri {
        uri: uri.into(),
        reason: e.to_string(),
    })?;
    u.set_fragment(None);
    Ok(u)
}

impl SchemaRegistry {
    /// An empty registry.
    pub fn new() -> SchemaRegistry {
        SchemaRegistry::default()
    }

    /// Registers `schema` under the absolute `uri` (an empty fragment is dropped). Cost:
    /// a URI parse.
    pub fn insert(&mut self, uri: &str, schema: Value) -> Result<(), RegistryError> {
        let u = absolute(uri)?;
        self.docs.insert(u.to_string(), schema);
        Ok(())
    }

    /// Registers `schema` under its own `$id` (or draft 4's `id`).
    pub fn insert_by_id(&mut self, schema: Value, file: &str) -> Result<(), RegistryError> {
        let id = ["$id", "id"]
            .iter()
            .find_map(|k| schema.get(k).and_then(Value::as_str))
            .map(str::to_string)
            .ok_or_else(|| RegistryError::NoId { file: file.into() })?;
        self.insert(&id, schema)
    }

    /// Reads one JSON file. Cost: the file's size.
    fn read(path: &Path) -> Result<Value, RegistryError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| RegistryError::File {
            file: file.clone(),
            reason: e.to_string(),
        })?;
        serde_json::from_str(&text).map_err(|e| RegistryError::File {
            file,
            reason: e.to_string(),
        })
    }

    /// Registers `path` under `uri`.
    pub fn insert_file(&mut self, uri: &str, path: &Path) -> Result<(), RegistryError> {
        let v = Self::read(path)?;
        self.insert(uri, v)
    }

    /// Registers every `*.json` file under `dir` (recursively): under `base_uri` plus its
    /// path relative to `dir` when `base_uri` is given (`http://localhost:1234/` and
    /// `dir/a/b.json` give `http://localhost:1234/a/b.json`), and under its `$id` when it
    /// has one. A file with neither is an error. Cost: reading every file.
    pub fn insert_dir(
        &mut self,
        dir: &Path,
        base_uri: Option<&str>,
    ) -> Result<usize, RegistryError> {
        let mut files = Vec::new();
        collect_json(dir, &mut files)?;
        files.sort();
        for f in &files {
            let v = Self::read(f)?;
            let rel = f.strip_prefix(dir).unwrap_or(f);
            let has_id = ["$id", "id"]
                .iter()
                .any(|k| v.get(k).and_then(Value::as_str).is_some());
            if let Some(base) = base_uri {
                let rel: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                let uri = format!("{}/{}", base.trim_end_matches('/'), rel.join("/"));
                self.insert(&uri, v.clone())?;
            } else if !has_id {
                return Err(RegistryError::NoId {
                    file: f.display().to_string(),
                });
            }
            if has_id {
                // Under its `$id` too (unless that is taken by a file of its own name).
                let file = f.display().to_string();
                let mut by_id = SchemaRegistry::new();
                if by_id.insert_by_id(v.clone(), &file).is_ok() {
                    for (k, x) in by_id.docs {
                        self.docs.entry(k).or_insert(x);
                    }
                }
            }
        }
        Ok(files.len())
    }

    /// How many documents are registered.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The schema registered at `uri` (or the official meta-schema there), if any.
    /// Cost: a hash lookup.
    pub(super) fn lookup(&self, uri: &str) -> Option<&Value> {
        self.get(&absolute(uri).ok()?)
    }

    fn get(&self, uri: &Url) -> Option<&Value> {
        self.docs
            .get(uri.as_str())
            .or_else(|| meta_schema(uri.as_str()))
    }
}

/// The official meta-schema at `uri`, which every registry holds (they come with the
/// `referencing` crate, the validator's; nothing is fetched).
fn meta_schema(uri: &str) -> Option<&'static Value> {
    use referencing::meta as m;
    let doc = match uri {
        "http://json-schema.org/draft-04/schema" => &m::DRAFT4,
        "http://json-schema.org/draft-06/schema" => &m::DRAFT6,
        "http://json-schema.org/draft-07/schema" => &m::DRAFT7,
        "https://json-schema.org/draft/2019-09/schema" => &m::DRAFT201909,
        "https://json-schema.org/draft/2019-09/meta/applicator" => &m::DRAFT201909_APPLICATOR,
        "https://json-schema.org/draft/2019-09/meta/content" => &m::DRAFT201909_CONTENT,
        "https://json-schema.org/draft/2019-09/meta/core" => &m::DRAFT201909_CORE,
        "https://json-schema.org/draft/2019-09/meta/format" => &m::DRAFT201909_FORMAT,
        "https://json-schema.org/draft/2019-09/meta/meta-data" => &m::DRAFT201909_META_DATA,
        "https://json-schema.org/draft/2019-09/meta/validation" => &m::DRAFT201909_VALIDATION,
        "https://json-schema.org/draft/2020-12/schema" => &m::DRAFT202012,
        "https://json-schema.org/draft/2020-12/meta/core" => &m::DRAFT202012_CORE,
        "https://json-schema.org/draft/2020-12/meta/applicator" => &m::DRAFT202012_APPLICATOR,
        "https://json-schema.org/draft/2020-12/meta/unevaluated" => &m::DRAFT202012_UNEVALUATED,
        "https://json-schema.org/draft/2020-12/meta/validation" => &m::DRAFT202012_VALIDATION,
        "https://json-schema.org/draft/2020-12/meta/meta-data" => &m::DRAFT202012_META_DATA,
        "https://json-schema.org/draft/2020-12/meta/format-annotation" => {
            &m::DRAFT202012_FORMAT_ANNOTATION
        }
        "https://json-schema.org/draft/2020-12/meta/format-assertion" => {
            &m::DRAFT202012_FORMAT_ASSERTION
        }
        "https://json-schema.org/draft/2020-12/meta/content" => &m::DRAFT202012_CONTENT,
        _ => return None,
    };
    Some(&***doc)
}

fn collect_json(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), RegistryError> {
    let rd = std::fs::read_dir(dir).map_err(|e| RegistryError::File {
        file: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_json(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
    Ok(())
}

/// A sub-schema: a document (0: the one compiled) and a JSON pointer in it.
type Loc = (usize, String);

/// What the walk learned of all the documents.
struct Index {
    draft: u32,
    /// The documents: the root, then those taken from the registry, with their URIs.
    docs: Vec<(Arc<Value>, Url)>,
    /// Each document's draft (its `$schema`'s, else the root's).
    drafts: Vec<u32>,
    /// Resource URI (no fragment) to its root.
    resources: HashMap<String, Loc>,
    /// `resource#name` to the named location (`$anchor`, `$dynamicAnchor`, `$id: "#name"`).
    anchors: HashMap<String, Loc>,
    /// Dynamic anchor name to the resources declaring it (`$recursiveAnchor: true` counts
    /// as the name `""`).
    dynamic: HashMap<String, Vec<String>>,
    /// Each walked sub-schema's base URI.
    bases: HashMap<Loc, Url>,
    /// The dynamic anchor names whose target depends on the path: declared by several
    /// resources, not by the root (filled after every reachable document is loaded).
    scoped: HashSet<String>,
    /// The copies the bundle is made of: slot 0 is the root document, the others go
    /// under [`DOCS_KEY`] in order. Each is a sub-schema and the dynamic scope it is
    /// evaluated in.
    slots: Vec<(Loc, Scope)>,
}

/// The dynamic scope, as far as the bundle needs it: for each name in
/// [`Index::scoped`], the outermost resource entered that declares it.
type Scope = BTreeMap<String, String>;

/// Most copies of sub-schemas the dynamic scopes may need.
const MAX_SLOTS: usize = 256;

fn id_keyword(draft: u32) -> &'static str {
    if draft == 4 {
        "id"
    } else {
        "$id"
    }
}

impl Index {
    fn walk(&mut self, doc: usize, ptr: String, mut base: Url, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        // The document by its `Arc`: borrowed while the index grows (a copy of each
        // sub-schema made the walk quadratic).
        let d = self.docs[doc].0.clone();
        let draft = self.drafts[doc];
        let Some(v) = d.pointer(&ptr) else {
            return;
        };
        let loc = (doc, ptr.clone());
        if self.bases.contains_key(&loc) {
            return;
        }
        let Value::Object(m) = v else {
            self.bases.insert(loc, base);
            return;
        };
        // Before 2019-09 a `$ref` makes its siblings (an `$id` too) ignored.
        let ref_only = draft <= 7 && m.contains_key("$ref");
        if let Some(Value::String(id)) = m.get(id_keyword(draft)).filter(|_| !ref_only) {
            match id.strip_prefix('#') {
                // Draft 6/7: a location-independent name.
                Some(name) if draft <= 7 && !name.is_empty() => {
                    let mut u = base.clone();
                    u.set_fragment(Some(name));
                    self.anchors.insert(u.to_string(), loc.clone());
                }
                _ => {
                    if let Ok(mut u) = base.join(id) {
                        let frag = u.fragment().map(str::to_string);
                        u.set_fragment(None);
                        base = u;
                        self.resources
                            .entry(base.to_string())
                            .or_insert_with(|| loc.clone());
                        if let Some(f) = frag.filter(|f| !f.is_empty() && draft <= 7) {
                            let mut a = base.clone();
                            a.set_fragment(Some(&f));
                            self.anchors.insert(a.to_string(), loc.clone());
                        }
                    }
                }
            }
        }
        for key in ["$anchor", "$dynamicAnchor"] {
            if draft < 2019 {
                break;
            }
            if let Some(Value::String(name)) = m.get(key) {
                let mut u = base.clone();
                u.set_fragment(Some(name));
                self.anchors.entry(u.to_string()).or_insert(loc.clone());
                if key == "$dynamicAnchor" && draft >= 2020 {
                    self.dynamic
                        .entry(name.clone())
                        .or_default()
                        .push(base.to_string());
                }
            }
        }
        if draft == 2019 && m.get("$recursiveAnchor") == Some(&Value::Bool(true)) {
            self.dynamic
                .entry(String::new())
                .or_default()
                .push(base.to_string());
        }
        self.bases.insert(loc, base.clone());
        for (path, _) in children(m, draft) {
            let mut p = ptr.clone();
            for k in &path {
                p = join(&p, k);
            }
            self.walk(doc, p, base.clone(), depth + 1);
        }
    }

    /// The base URI of `loc`: its own when walked, else its nearest walked ancestor's
    /// (a pointer into an unknown keyword), which is then walked from there.
    fn base_of(&mut self, loc: &Loc) -> Url {
        if let Some(b) = self.bases.get(loc) {
            return b.clone();
        }
        let mut p = loc.1.clone();
        let base = loop {
            match p.rfind('/') {
                Some(i) => p.truncate(i),
                None => break self.docs[loc.0].1.clone(),
            }
            if let Some(b) = self.bases.get(&(loc.0, p.clone())) {
                break b.clone();
            }
        };
        self.walk(loc.0, loc.1.clone(), base.clone(), 0);
        self.bases.get(loc).cloned().unwrap_or(base)
    }

    /// The document registered at `uri`, added and walked if new.
    fn load(&mut self, uri: &Url, registry: Option<&SchemaRegistry>) -> Result<bool, String> {
        if self.resources.contains_key(uri.as_str()) {
            return Ok(true);
        }
        let found = match registry {
            Some(r) => r.get(uri),
            None => meta_schema(uri.as_str()),
        };
        let Some(doc) = found else {
            return Ok(false);
        };
        // A document of another draft is read with its own keywords, and its sub-schemas
        // written in the root's (see `drafts`).
        let draft = match doc.get("$schema") {
            Some(_) => super::draft_of_schema(doc),
            None => self.draft,
        };
        let d = self.docs.len();
        self.docs.push((Arc::new(doc.clone()), uri.clone()));
        self.drafts.push(draft);
        self.resources.insert(uri.to_string(), (d, String::new()));
        self.walk(d, String::new(), uri.clone(), 0);
        Ok(true)
    }

    /// The target of reference `r` written at `at` (whose base URI is `base`).
    fn resolve(
        &mut self,
        r: &str,
        base: &Url,
        at: &str,
        registry: Option<&SchemaRegistry>,
    ) -> Result<Loc, SchemaError> {
        let unresolved = |why: &str| SchemaError::UnresolvedRef {
            uri: r.to_string(),
            pointer: at.to_string(),
            reason: why.to_string(),
        };
        let mut u = base
            .join(r)
            .map_err(|e| unresolved(&format!("not a URI reference: {e}")))?;
        let frag = percent_decode(u.fragment().unwrap_or(""));
        u.set_fragment(None);
        if !self.load(&u, registry).map_err(|e| unresolved(&e))? {
            return Err(unresolved(&format!(
                "no document {u} in the schema or the schema registry (nothing is fetched over the network)"
            )));
        }
        if frag.is_empty() || frag.starts_with('/') {
            let (doc, root) = self
                .resources
                .get(u.as_str())
                .cloned()
                .ok_or_else(|| unresolved(&format!("no resource {u}")))?;
            let ptr = format!("{root}{frag}");
            if self.docs[doc].0.pointer(&ptr).is_none() {
                return Err(unresolved("the JSON pointer points nowhere"));
            }
            return Ok((doc, ptr));
        }
        let mut a = u.clone();
        a.set_fragment(Some(&frag));
        let key = a.to_string();
        if let Some(l) = self.anchors.get(&key) {
            return Ok(l.clone());
        }
        Err(unresolved(&format!("no anchor {frag:?} in {u}")))
    }

    /// `scope` after entering `resource`: the scoped names it declares that no outer
    /// resource did are bound to it.
    fn enter(&self, scope: &Scope, resource: &str) -> Scope {
        let mut out = scope.clone();
        for name in &self.scoped {
            let declares = self
                .dynamic
                .get(name)
                .is_some_and(|v| v.iter().any(|r| r == resource));
            if declares && !out.contains_key(name) {
                out.insert(name.clone(), resource.to_string());
            }
        }
        out
    }

    /// The scope at `(doc, to)` when evaluation descends to it from `(doc, from)` (a
    /// prefix) in `scope`: every resource whose root lies on the way is entered.
    fn descend(&mut self, scope: &Scope, doc: usize, from: &str, to: &str) -> Scope {
        let mut out = scope.clone();
        if self.scoped.is_empty() {
            return out;
        }
        let rest = &to[from.len()..];
        for (i, c) in rest.char_indices() {
            if c == '/' && i > 0 {
                out = self.enter_at(&out, &(doc, format!("{from}{}", &rest[..i])));
            }
        }
        if !rest.is_empty() {
            out = self.enter_at(&out, &(doc, to.to_string()));
        }
        out
    }

    /// `scope` after reaching `loc`, which enters a resource when it is one's root.
    fn enter_at(&mut self, scope: &Scope, loc: &Loc) -> Scope {
        let is_root = self.resources.values().any(|r| r == loc);
        if !is_root {
            return scope.clone();
        }
        let res = self.base_of(loc).to_string();
        self.enter(scope, &res)
    }

    /// The bundle pointer of `target` evaluated in `scope`: inside a copy that already
    /// serves it, else in a new copy (of its whole document where that serves).
    fn place(&mut self, target: &Loc, scope: &Scope, at: &str) -> Result<String, SchemaError> {
        for i in 0..self.slots.len() {
            let (loc, sc) = self.slots[i].clone();
            let inside = loc.0 == target.0
                && target.1.starts_with(&loc.1)
                && (target.1.len() == loc.1.len() || target.1[loc.1.len()..].starts_with('/'));
            if inside && self.descend(&sc, loc.0, &loc.1, &target.1) == *scope {
                return Ok(format!("{}{}", slot_ptr(i), &target.1[loc.1.len()..]));
            }
        }
        if self.slots.len() >= MAX_SLOTS {
            return Err(SchemaError::Unsupported {
                keyword: "$dynamicRef".into(),
                pointer: at.to_string(),
                reason: format!(
                    "the dynamic scopes of the schema need more than {MAX_SLOTS} copies of its sub-schemas"
                ),
            });
        }
        let whole = (target.0, String::new());
        let loc = if target.0 > 0 && self.descend(scope, target.0, "", &target.1) == *scope {
            whole
        } else {
            target.clone()
        };
        let prefix = loc.1.len();
        self.slots.push((loc, scope.clone()));
        Ok(format!(
            "{}{}",
            slot_ptr(self.slots.len() - 1),
            &target.1[prefix..]
        ))
    }

    /// The scope in force at `target`, reached by a reference from `scope`.
    fn scope_at(&mut self, scope: &Scope, target: &Loc) -> Scope {
        if self.scoped.is_empty() {
            return scope.clone();
        }
        let res = self.base_of(target).to_string();
        self.enter(scope, &res)
    }

    /// Loads every document the references reach, so that [`Index::scoped`] knows every
    /// resource declaring a dynamic anchor. Unresolved references are left for the
    /// rewrite to report.
    fn load_all(&mut self, registry: Option<&SchemaRegistry>) {
        let mut d = 0;
        while d < self.docs.len() {
            let mut locs: Vec<Loc> = self.bases.keys().filter(|l| l.0 == d).cloned().collect();
            locs.sort();
            for loc in locs {
                let doc = self.docs[d].0.clone();
                let Some(Value::Object(m)) = doc.pointer(&loc.1) else {
                    continue;
                };
                let base = self.base_of(&loc);
                for key in ["$ref", "$dynamicRef", "$recursiveRef"] {
                    if let Some(Value::String(r)) = m.get(key) {
                        let _ = self.resolve(r, &base, &loc.1, registry);
                    }
                }
            }
            d += 1;
        }
        let root = self.bases.get(&(0, String::new())).map(Url::to_string);
        self.scoped = self
            .dynamic
            .iter()
            .filter(|(_, res)| {
                let distinct: HashSet<&String> = res.iter().collect();
                distinct.len() > 1 && !root.as_ref().is_some_and(|r| distinct.contains(r))
            })
            .map(|(n, _)| n.clone())
            .collect();
    }

    /// Where a dynamic reference `r` (`name` its anchor; `""` for `$recursiveRef`)
    /// written at `at` lands when evaluated in `scope`.
    fn resolve_dynamic(
        &mut self,
        r: &str,
        name: &str,
        base: &Url,
        at: &str,
        scope: &Scope,
        registry: Option<&SchemaRegistry>,
    ) -> Result<Loc, SchemaError> {
        let initial = self.resolve(r, base, at, registry)?;
        let initial_base = self.base_of(&initial);
        let declares = |ix: &Index, res: &str| {
            ix.dynamic
                .get(name)
                .is_some_and(|v| v.iter().any(|x| x == res))
        };
        // Only a target that declares the dynamic anchor starts the dynamic search
        // (`$recursiveRef`: a resource root with `$recursiveAnchor: true`).
        let dynamic_target = if name.is_empty() {
            declares(self, initial_base.as_str())
                && self.resources.get(initial_base.as_str()) == Some(&initial)
        } else {
            declares(self, initial_base.as_str())
                && self
                    .docs
                    .get(initial.0)
                    .and_then(|(d, _)| d.pointer(&initial.1))
                    .and_then(|v| v.get("$dynamicAnchor"))
                    .and_then(Value::as_str)
                    == Some(name)
        };
        if !dynamic_target {
            return Ok(initial);
        }
        // Evaluation starts at the root, the outermost resource of every scope.
        let root = self.docs[0].1.clone();
        let root_res = self.bases.get(&(0, String::new())).cloned().unwrap_or(root);
        if declares(self, root_res.as_str()) {
            return self.anchor_in(root_res.as_str(), name, r, at);
        }
        match scope.get(name) {
            Some(res) if self.scoped.contains(name) => self.anchor_in(res, name, r, at),
            // One declarer (the initial target's resource), or none entered yet.
            _ => Ok(initial),
        }
    }

    /// The location of dynamic anchor `name` in resource `res` (`""`: its root).
    fn anchor_in(&self, res: &str, name: &str, r: &str, at: &str) -> Result<Loc, SchemaError> {
        // The walk registered every resource and anchor it counted: a miss is a bug, but
        // an error, not a panic.
        let lost = |what: &str| SchemaError::UnresolvedRef {
            uri: r.to_string(),
            pointer: at.to_string(),
            reason: format!("the dynamic anchor's resource {what} was not indexed"),
        };
        if name.is_empty() {
            return self.resources.get(res).cloned().ok_or_else(|| lost(res));
        }
        let mut u = Url::parse(res).map_err(|e| SchemaError::UnresolvedRef {
            uri: res.to_string(),
            pointer: at.to_string(),
            reason: e.to_string(),
        })?;
        u.set_fragment(Some(name));
        self.anchors
            .get(u.as_str())
            .cloned()
            .ok_or_else(|| lost(u.as_str()))
    }
}

/// The bundle pointer of copy `i` (see [`Index::slots`]).
fn slot_ptr(i: usize) -> String {
    if i == 0 {
        String::new()
    } else {
        format!("/{DOCS_KEY}/{}", i - 1)
    }
}

/// `#` and the JSON pointer `ptr` as a URI fragment: every character RFC 3986 does not
/// allow there percent-encoded (`[`, `%`, spaces, non-ASCII...), so that any validator
/// reads the reference.
fn fragment(ptr: &str) -> String {
    let mut out = String::with_capacity(ptr.len() + 1);
    out.push('#');
    for b in ptr.bytes() {
        let plain = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?".contains(&b);
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether `schema` needs [`bundle`]: an identifier or a reference that is not a plain
/// in-document pointer, or a dynamic reference. Cost: one walk of the schema.
pub fn needs_bundle(schema: &Value) -> bool {
    fn go(v: &Value, depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        match v {
            Value::Object(m) => m.iter().any(|(k, x)| match k.as_str() {
                "$ref" => x.as_str().is_some_and(|r| !r.starts_with("#/") && r != "#"),
                // The root's identifier changes nothing for pointers into the document
                // (a reference naming it by URI is caught above).
                "$id" if depth == 0 => false,
                "$id" | "$dynamicRef" | "$recursiveRef" | "$recursiveAnchor" | "$dynamicAnchor" => {
                    true
                }
                "enum" | "const" | "default" | "examples" => false,
                _ => go(x, depth + 1),
            }),
            Value::Array(a) => a.iter().any(|x| go(x, depth + 1)),
            _ => false,
        }
    }
    go(schema, 0)
}

/// One document with every reference a JSON pointer into itself (see the module docs):
/// `schema` with the registry's documents it reaches copied under [`DOCS_KEY`], references
/// rewritten, identifiers removed. `draft` is the root's (4, 6, 7, 2019 or 2020). Cost: one
/// walk of each document reached, and a copy of it.
pub fn bundle(
    schema: &Value,
    draft: u32,
    registry: Option<&SchemaRegistry>,
) -> Result<Value, SchemaError> {
    let root_uri = Url::parse(DEFAULT_BASE).expect("a valid URL");
    let mut ix = Index {
        draft,
        docs: vec![(Arc::new(schema.clone()), root_uri.clone())],
        drafts: vec![draft],
        resources: HashMap::new(),
        anchors: HashMap::new(),
        dynamic: HashMap::new(),
        bases: HashMap::new(),
        scoped: HashSet::new(),
        slots: vec![((0, String::new()), Scope::new())],
    };
    ix.resources
        .insert(root_uri.to_string(), (0, String::new()));
    ix.walk(0, String::new(), root_uri, 0);
    ix.load_all(registry);
    // Rewrite each copy in turn; resolving may add copies.
    let mut out: Vec<Value> = Vec::new();
    let mut i = 0;
    while i < ix.slots.len() {
        let ((doc, ptr), scope) = ix.slots[i].clone();
        let mut v = ix.docs[doc]
            .0
            .pointer(&ptr)
            .cloned()
            .unwrap_or(Value::Bool(true));
        rewrite(&mut ix, doc, &ptr, &mut v, &scope, registry, 0)?;
        out.push(v);
        i += 1;
    }
    let mut root = out.remove(0);
    if !out.is_empty() {
        // `true`/`false` reference nothing.
        if let Value::Object(m) = &mut root {
            m.insert(DOCS_KEY.into(), Value::Array(out));
        }
    }
    Ok(root)
}

fn rewrite(
    ix: &mut Index,
    doc: usize,
    ptr: &str,
    v: &mut Value,
    scope: &Scope,
    registry: Option<&SchemaRegistry>,
    depth: usize,
) -> Result<(), SchemaError> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let Value::Object(m) = v else {
        return Ok(());
    };
    let loc = (doc, ptr.to_string());
    let base = ix.base_of(&loc);
    let at = if doc == 0 {
        super::pointer_or_root(ptr)
    } else {
        format!("{}#{ptr}", ix.docs[doc].1)
    };
    let draft = ix.drafts[doc];
    let mut extra_refs = Vec::new();
    if let Some(Value::String(r)) = m.get("$ref") {
        let target = ix.resolve(r, &base, &at, registry)?;
        let sc = ix.scope_at(scope, &target);
        let p = ix.place(&target, &sc, &at)?;
        m.insert("$ref".into(), Value::String(fragment(&p)));
    }
    for (key, active) in [
        ("$dynamicRef", draft >= 2020),
        ("$recursiveRef", draft == 2019),
    ] {
        let Some(Value::String(r)) = m.get(key).cloned() else {
            continue;
        };
        if !active {
            continue;
        }
        let name = if key == "$recursiveRef" {
            String::new()
        } else {
            let u = base.join(&r).ok();
            percent_decode(u.as_ref().and_then(|u| u.fragment()).unwrap_or(""))
        };
        let t = ix.resolve_dynamic(&r, &name, &base, &at, scope, registry)?;
        let sc = ix.scope_at(scope, &t);
        let p = ix.place(&t, &sc, &at)?;
        m.remove(key);
        extra_refs.push(fragment(&p));
    }
    for r in extra_refs {
        if m.contains_key("$ref") {
            let item = Value::Object(Map::from_iter([("$ref".to_string(), Value::String(r))]));
            match m.entry("allOf").or_insert_with(|| Value::Array(Vec::new())) {
                Value::Array(a) => a.push(item),
                other => *other = Value::Array(vec![item]),
            }
        } else {
            m.insert("$ref".into(), Value::String(r));
        }
    }
    if m.get(id_keyword(draft)).is_some_and(Value::is_string) {
        m.remove(id_keyword(draft));
    }
    for k in ["$anchor", "$dynamicAnchor", "$recursiveAnchor"] {
        m.remove(k);
    }
    // Children, by the same keywords the walk took; a child that is a resource's root
    // enters it.
    let paths: Vec<Vec<String>> = children(m, draft).into_iter().map(|(p, _)| p).collect();
    for path in paths {
        let mut p = ptr.to_string();
        for k in &path {
            p = join(&p, k);
        }
        let sc = ix.descend(scope, doc, ptr, &p);
        if let Some(node) = child_mut(v, &path) {
            rewrite(ix, doc, &p, node, &sc, registry, depth + 1)?;
        }
    }
    // Last, as its keywords may move the children rewritten above.
    if draft != ix.draft {
        if let Value::Object(m) = v {
            super::drafts::translate(m, draft, ix.draft, &at)?;
        }
    }
    Ok(())
}
