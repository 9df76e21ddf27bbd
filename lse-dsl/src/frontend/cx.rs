//! The lowering context: the kernel being built (params, shared arrays, locals), lexical
//! scopes, and the side table of source sites that the checks after lowering (break
//! placement, uniformity) use to point errors at the right span.
//!
//! The IR carries no spans, so every statement the lowering emits is keyed by its *path*: the
//! statement's index in its block, preceded by `(index, branch)` pairs of the enclosing
//! statements (branch 0 is a `then` or loop body, 1 an `else`). The checks walk the IR with
//! the same paths.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use proc_macro2::Span;

use super::fns::LoomFn;
use crate::ir::{
    Block, Local, Param, ParamId, SharedArray, SharedId, Stmt, TileDecl, TileId, Ty, VarId,
    WORKGROUP_ALIGN,
};

/// What a name refers to inside the kernel body.
#[derive(Clone, Debug)]
pub(super) enum Binding {
    Local {
        var: VarId,
        mutable: bool,
    },
    Param(ParamId),
    Shared(SharedId),
    Tile(TileId),
    /// A folded `const` item: always an `ExprKind::Const`.
    Const(crate::ir::Expr),
    /// A LOOM `fn`'s value parameter or `let`: the expression it names (`fns`).
    Value(crate::ir::Expr),
}

/// Where a statement came from: the span errors point at and a short source rendering
/// (the condition of an `if`/`while`, the range of a `for`, the call of a barrier or
/// collective).
#[derive(Clone, Debug)]
pub(super) struct Site {
    pub span: Span,
    pub text: String,
}

/// Statement path -> site. See the module docs.
pub(super) type Sites = HashMap<Vec<u32>, Site>;

/// The site of the statement at `path`; every emitted statement has one, but a missing
/// entry must not crash the compiler, so it falls back to the macro call site.
pub(super) fn site_at(sites: &Sites, path: &[u32]) -> Site {
    sites.get(path).cloned().unwrap_or_else(|| Site {
        span: Span::call_site(),
        text: "statement".into(),
    })
}

/// State of one kernel's lowering.
pub(super) struct Cx {
    pub workgroup: u32,
    /// The kernel's `subgroup = N`, if given.
    pub subgroup: Option<u32>,
    pub params: Vec<Param>,
    pub shared: Vec<SharedArray>,
    pub tiles: Vec<TileDecl>,
    pub locals: Vec<Local>,
    scopes: Vec<HashMap<String, Binding>>,
    pub sites: Sites,
    /// Path prefix of the block being lowered.
    pub path: Vec<u32>,
    /// Collectives hoisted out of the expressions of the statement being lowered; they are
    /// emitted just before it.
    pub pending: Vec<(Stmt, Site)>,
    /// When set, collectives may not be hoisted here; the text names the context.
    pub no_hoist: Option<&'static str>,
    /// Number of loops around the statement being lowered.
    pub loop_depth: u32,
    /// Whether statements are being lowered at the top level of the body.
    pub top_level: bool,
    /// The LOOM functions the body may call, by name (`fns::collect`).
    pub fns: HashMap<String, Option<Rc<LoomFn>>>,
    /// The functions called so far.
    pub called: HashSet<String>,
    /// The functions being inlined, outermost first.
    pub inlining: Vec<Rc<LoomFn>>,
}

impl Cx {
    pub fn new(workgroup: u32, params: Vec<Param>) -> Cx {
        let mut top = HashMap::new();
        for (i, p) in params.iter().enumerate() {
            top.insert(p.name().to_string(), Binding::Param(i as ParamId));
        }
        Cx {
            workgroup,
            subgroup: None,
            params,
            shared: Vec::new(),
            tiles: Vec::new(),
            locals: Vec::new(),
            scopes: vec![top],
            sites: Sites::new(),
            path: Vec::new(),
            pending: Vec::new(),
            no_hoist: None,
            loop_depth: 0,
            top_level: true,
            fns: HashMap::new(),
            called: HashSet::new(),
            inlining: Vec::new(),
        }
    }

    pub fn push_scope(&mut self) {
        self.scopes.push(HashMap::new());
    }

    pub fn pop_scope(&mut self) {
        self.scopes.pop();
    }

    pub fn bind(&mut self, name: &str, b: Binding) {
        self.scopes
            .last_mut()
            .expect("scope stack is never empty")
            .insert(name.to_string(), b);
    }

    pub fn lookup(&self, name: &str) -> Option<&Binding> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    /// Switches to the scopes of a LOOM `fn`'s body: the kernel's top-level constants (for a
    /// fn declared in the kernel body, `with_consts`), the parameters `bound`, and a scope for
    /// the body's own bindings. Returns the scopes to restore with [`Cx::leave_fn`].
    pub fn enter_fn(
        &mut self,
        bound: HashMap<String, Binding>,
        with_consts: bool,
    ) -> Vec<HashMap<String, Binding>> {
        // The kernel's top-level scope, or the constants scope of the fn being inlined: the
        // first two scopes either way.
        let consts = self
            .scopes
            .iter()
            .take(if with_consts { 2 } else { 0 })
            .flat_map(|s| s.iter())
            .filter(|(_, b)| matches!(b, Binding::Const(_)))
            .map(|(n, b)| (n.clone(), b.clone()))
            .collect();
        std::mem::replace(&mut self.scopes, vec![consts, bound, HashMap::new()])
    }

    /// Back to the scopes [`Cx::enter_fn`] returned.
    pub fn leave_fn(&mut self, saved: Vec<HashMap<String, Binding>>) {
        self.scopes = saved;
    }

    /// Bytes of workgroup memory the shared arrays and tiles declared so far take, laid out
    /// as [`crate::ir::Kernel::workgroup_block`] lays them (each at a multiple of
    /// [`WORKGROUP_ALIGN`]).
    pub fn workgroup_bytes(&self) -> u64 {
        let arrays = self.shared.iter().map(|s| s.elem.size_bytes() * s.len);
        let tiles = self.tiles.iter().map(|t| t.len() * t.elem.size_bytes());
        arrays
            .chain(tiles)
            .map(|b| u64::from(b).next_multiple_of(u64::from(WORKGROUP_ALIGN)))
            .sum()
    }

    /// A fresh local; names may repeat, ids never do.
    pub fn new_local(&mut self, name: &str, ty: Ty) -> VarId {
        self.locals.push(Local {
            name: name.to_string(),
            ty,
        });
        (self.locals.len() - 1) as VarId
    }

    /// Appends `stmt` to `out`, recording its site under its path.
    pub fn emit(&mut self, out: &mut Block, stmt: Stmt, site: Site) {
        let mut path = self.path.clone();
        path.push(out.len() as u32);
        self.sites.insert(path, site);
        out.push(stmt);
    }

    /// Emits the collectives hoisted from the statement being lowered.
    pub fn flush_pending(&mut self, out: &mut Block) {
        for (stmt, site) in std::mem::take(&mut self.pending) {
            self.emit(out, stmt, site);
        }
    }

    /// Runs `f` with hoisting forbidden (lazily evaluated operands, `while` conditions...).
    pub fn without_hoist<T>(&mut self, why: &'static str, f: impl FnOnce(&mut Cx) -> T) -> T {
        let saved = self.no_hoist.replace(why);
        let r = f(self);
        self.no_hoist = saved;
        r
    }
}
