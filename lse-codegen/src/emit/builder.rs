//! A minimal LLVM IR text builder: fresh value and label names, instructions, blocks,
//! intrinsic declarations and metadata nodes.

use std::collections::BTreeSet;

/// Accumulates the text of one function plus the module-level pieces it needs.
pub(crate) struct Builder {
    /// Allocas, emitted at the top of the entry block so mem2reg can promote them.
    pub allocas: String,
    /// Instructions after the allocas, starting in the entry block.
    pub body: String,
    /// Label of the block instructions currently go to.
    pub cur: String,
    /// `declare` lines for intrinsics.
    pub decls: BTreeSet<String>,
    /// Metadata definitions (`!N = ...`).
    pub metadata: Vec<String>,
    next_value: u32,
    next_label: u32,
    /// First metadata id handed out by [`Builder::md`].
    pub md_base: u32,
    /// Whether the function calls LOOM's math functions ([`crate::math`]), whose
    /// definitions the module then carries.
    pub uses_math: bool,
}

/// The target-specific parts of a one-kernel module; [`Builder::module`] puts them around the
/// function the builder holds.
pub(crate) struct ModuleText<'a> {
    /// First line, a `;` comment naming the kernel and target.
    pub comment: &'a str,
    pub data_layout: &'a str,
    pub triple: &'a str,
    /// Module-level globals.
    pub globals: &'a str,
    /// The function's `define ... {` line, without the `entry:` label.
    pub define: &'a str,
    /// Attribute groups and named metadata, before the builder's own metadata nodes.
    pub trailer: &'a str,
}

impl Builder {
    /// The whole module: header, globals, the function (allocas first), helpers, the
    /// declarations the function uses, `trailer`, then the metadata nodes handed out.
    pub fn module(&self, m: ModuleText<'_>) -> String {
        let mut out = format!(
            "{}\ntarget datalayout = \"{}\"\ntarget triple = \"{}\"\n\n{}\n{}\nentry:\n{}{}}}\n\n",
            m.comment, m.data_layout, m.triple, m.globals, m.define, self.allocas, self.body
        );
        let mut decls = self.decls.clone();
        if self.uses_math {
            out.push_str(&crate::math::definitions());
            out.push('\n');
            decls.extend(crate::math::DECLS.iter().map(|d| d.to_string()));
        }
        for d in &decls {
            out.push_str(d);
            out.push('\n');
        }
        out.push('\n');
        out.push_str(m.trailer);
        for md in &self.metadata {
            out.push_str(md);
            out.push('\n');
        }
        out
    }

    pub fn new() -> Self {
        Builder {
            allocas: String::new(),
            body: String::new(),
            cur: "entry".into(),
            decls: BTreeSet::new(),
            metadata: Vec::new(),
            next_value: 0,
            next_label: 0,
            md_base: 100,
            uses_math: false,
        }
    }

    /// A fresh SSA value name.
    pub fn fresh(&mut self) -> String {
        self.next_value += 1;
        format!("%v{}", self.next_value)
    }

    /// A fresh block label (without `%`).
    pub fn label(&mut self, hint: &str) -> String {
        self.next_label += 1;
        format!("{hint}{}", self.next_label)
    }

    /// Appends one instruction.
    pub fn ins(&mut self, line: impl AsRef<str>) {
        self.body.push_str("  ");
        self.body.push_str(line.as_ref());
        self.body.push('\n');
    }

    /// Appends `%new = rhs` and returns `%new`.
    pub fn op(&mut self, rhs: impl AsRef<str>) -> String {
        let v = self.fresh();
        self.ins(format!("{v} = {}", rhs.as_ref()));
        v
    }

    /// Starts block `label`.
    pub fn start(&mut self, label: &str) {
        self.body.push_str(label);
        self.body.push_str(":\n");
        self.cur = label.to_string();
    }

    /// Unconditional branch to `label`.
    pub fn br(&mut self, label: &str) {
        self.ins(format!("br label %{label}"));
    }

    /// Conditional branch.
    pub fn cbr(&mut self, cond: &str, then_l: &str, else_l: &str) {
        self.ins(format!("br i1 {cond}, label %{then_l}, label %{else_l}"));
    }

    /// Declares an intrinsic (deduplicated).
    pub fn declare(&mut self, decl: &str) {
        self.decls.insert(decl.to_string());
    }

    /// Calls intrinsic `name` returning `ret`, declaring it with `params` types.
    pub fn call(&mut self, ret: &str, name: &str, args: &[(&str, &str)]) -> String {
        let params: Vec<&str> = args.iter().map(|(t, _)| *t).collect();
        self.declare(&format!("declare {ret} @{name}({})", params.join(", ")));
        let a: Vec<String> = args.iter().map(|(t, v)| format!("{t} {v}")).collect();
        self.op(format!("call {ret} @{name}({})", a.join(", ")))
    }

    /// Adds a metadata node with body `body` (which may mention `{self}` for its own id);
    /// returns `!N`.
    pub fn md(&mut self, body: &str) -> String {
        let id = format!("!{}", self.md_base + self.metadata.len() as u32);
        let text = body.replace("{self}", &id);
        self.metadata.push(format!("{id} = {text}"));
        id
    }
}
