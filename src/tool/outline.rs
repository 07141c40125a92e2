//! `outline`: the functions, types and methods of source files with their line ranges, from
//! tree-sitter syntax trees (Rust, Python, JavaScript, TypeScript/TSX, Go, C, C++). Cheaper
//! for the model than reading a whole file to find where things are.

use std::path::Path;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use tree_sitter::{Node, Parser};

use crate::protocol::ToolSpec;
use crate::tool::call::{cap_text, into_result, parse_args, run_blocking};
use crate::tool::path::{WorkspacePath, display_relative};
use crate::tool::{ApprovalNeed, IoOp, Tool, ToolContext, ToolError, ToolResult};

/// Most files outlined when `path` is a directory.
pub const OUTLINE_MAX_FILES: usize = 50;
/// Files larger than this are not parsed.
pub const OUTLINE_MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;
const OUTPUT_CAP: usize = 64 * 1024;

/// A language the outline understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Rust,
    Python,
    JavaScript,
    TypeScript,
    Tsx,
    Go,
    C,
    Cpp,
}

impl Language {
    /// The language of a file, by extension.
    pub fn of_path(path: &Path) -> Option<Language> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "rs" => Language::Rust,
            "py" | "pyi" => Language::Python,
            "js" | "mjs" | "cjs" | "jsx" => Language::JavaScript,
            "ts" | "mts" | "cts" => Language::TypeScript,
            "tsx" => Language::Tsx,
            "go" => Language::Go,
            "c" => Language::C,
            // The C++ grammar also parses C headers; a .h may be either.
            "h" | "hh" | "hpp" | "hxx" | "cc" | "cpp" | "cxx" | "c++" | "ipp" => Language::Cpp,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Tsx => "tsx",
            Language::Go => "go",
            Language::C => "c",
            Language::Cpp => "c++",
        }
    }

    fn grammar(self) -> tree_sitter::Language {
        match self {
            Language::Rust => tree_sitter_rust::LANGUAGE.into(),
            Language::Python => tree_sitter_python::LANGUAGE.into(),
            Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Language::Go => tree_sitter_go::LANGUAGE.into(),
            Language::C => tree_sitter_c::LANGUAGE.into(),
            Language::Cpp => tree_sitter_cpp::LANGUAGE.into(),
        }
    }
}

/// One definition found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// `fn`, `method`, `struct`, `class`, `interface`, …
    pub kind: &'static str,
    pub name: String,
    /// 1-based, inclusive.
    pub start_line: usize,
    pub end_line: usize,
    /// Nesting: 0 at top level, 1 for a method of a class, …
    pub depth: usize,
}

/// The symbols of `source`, in file order.
pub fn outline_source(language: Language, source: &[u8]) -> Result<Vec<Symbol>, ToolError> {
    let mut parser = Parser::new();
    parser
        .set_language(&language.grammar())
        .map_err(|source| ToolError::Grammar {
            language: language.name(),
            source,
        })?;
    let tree = parser.parse(source, None).ok_or(ToolError::NoParseTree {
        language: language.name(),
    })?;
    let mut symbols = Vec::new();
    collect(language, tree.root_node(), source, 0, false, &mut symbols);
    Ok(symbols)
}

fn collect(
    language: Language,
    root: Node,
    source: &[u8],
    depth: usize,
    in_type: bool,
    out: &mut Vec<Symbol>,
) {
    // An explicit stack, not recursion: deeply nested input must not overflow the thread stack.
    let mut stack: Vec<(Node, usize, bool)> = Vec::new();
    push_children(&mut stack, root, depth, in_type);
    while let Some((node, depth, in_type)) = stack.pop() {
        match classify(language, node, source, in_type) {
            Some((kind, name)) => {
                out.push(Symbol {
                    kind,
                    name,
                    start_line: node.start_position().row + 1,
                    end_line: node.end_position().row + 1,
                    depth,
                });
                let contains_methods = matches!(
                    kind,
                    "impl" | "trait" | "class" | "struct" | "interface" | "namespace" | "mod"
                );
                // Only containers are searched further: nested helper functions are noise.
                if contains_methods {
                    let inner_type = kind != "namespace" && kind != "mod";
                    push_children(&mut stack, node, depth + 1, inner_type);
                }
            }
            None => push_children(&mut stack, node, depth, in_type),
        }
    }
}

fn push_children<'t>(
    stack: &mut Vec<(Node<'t>, usize, bool)>,
    node: Node<'t>,
    depth: usize,
    in_type: bool,
) {
    let mut cursor = node.walk();
    let children: Vec<Node<'t>> = node.named_children(&mut cursor).collect();
    stack.extend(children.into_iter().rev().map(|c| (c, depth, in_type)));
}

fn text<'a>(node: Node, source: &'a [u8]) -> std::borrow::Cow<'a, str> {
    String::from_utf8_lossy(&source[node.byte_range()])
}

fn field_text(node: Node, field: &str, source: &[u8]) -> Option<String> {
    node.child_by_field_name(field).map(|n| {
        text(n, source)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    })
}

fn function_kind(in_type: bool, plain: &'static str) -> &'static str {
    if in_type { "method" } else { plain }
}

/// Whether `node` is a definition worth listing, and as what.
fn classify(
    language: Language,
    node: Node,
    source: &[u8],
    in_type: bool,
) -> Option<(&'static str, String)> {
    let kind = node.kind();
    let name = || field_text(node, "name", source);
    match language {
        Language::Rust => match kind {
            "function_item" | "function_signature_item" => {
                Some((function_kind(in_type, "fn"), name()?))
            }
            "struct_item" => Some(("struct", name()?)),
            "enum_item" => Some(("enum", name()?)),
            "union_item" => Some(("union", name()?)),
            "trait_item" => Some(("trait", name()?)),
            "type_item" => Some(("type", name()?)),
            "mod_item" => Some(("mod", name()?)),
            "macro_definition" => Some(("macro", name()?)),
            "impl_item" => {
                let ty = field_text(node, "type", source)?;
                Some((
                    "impl",
                    match field_text(node, "trait", source) {
                        Some(tr) => format!("{tr} for {ty}"),
                        None => ty,
                    },
                ))
            }
            _ => None,
        },
        Language::Python => match kind {
            "function_definition" => Some((function_kind(in_type, "def"), name()?)),
            "class_definition" => Some(("class", name()?)),
            _ => None,
        },
        Language::JavaScript | Language::TypeScript | Language::Tsx => match kind {
            "function_declaration" | "generator_function_declaration" | "function_signature" => {
                Some(("function", name()?))
            }
            "class_declaration" | "abstract_class_declaration" => Some(("class", name()?)),
            "method_definition" | "method_signature" | "abstract_method_signature" => {
                Some(("method", name()?))
            }
            "interface_declaration" => Some(("interface", name()?)),
            "type_alias_declaration" => Some(("type", name()?)),
            "enum_declaration" => Some(("enum", name()?)),
            "internal_module" | "module" => Some(("namespace", name()?)),
            "variable_declarator" => {
                let value = node.child_by_field_name("value")?;
                let is_function = matches!(
                    value.kind(),
                    "arrow_function" | "function_expression" | "function" | "generator_function"
                );
                is_function.then_some(())?;
                Some(("function", name()?))
            }
            _ => None,
        },
        Language::Go => match kind {
            "function_declaration" => Some(("func", name()?)),
            "method_declaration" => {
                let receiver = field_text(node, "receiver", source).unwrap_or_default();
                Some((
                    "method",
                    format!("{receiver} {}", name()?).trim().to_string(),
                ))
            }
            "type_spec" | "type_alias" => {
                let shape = node.child_by_field_name("type").map(|t| t.kind());
                let label = match shape {
                    Some("struct_type") => "struct",
                    Some("interface_type") => "interface",
                    _ => "type",
                };
                Some((label, name()?))
            }
            _ => None,
        },
        Language::C | Language::Cpp => match kind {
            "function_definition" => {
                let name = declarator_name(node.child_by_field_name("declarator")?, source)?;
                let method = in_type || name.contains("::");
                Some((if method { "method" } else { "function" }, name))
            }
            "field_declaration" | "declaration" if in_type => {
                let declarator = node.child_by_field_name("declarator")?;
                (declarator.kind() == "function_declarator").then_some(())?;
                Some(("method", declarator_name(declarator, source)?))
            }
            "struct_specifier" | "union_specifier" | "enum_specifier" | "class_specifier" => {
                node.child_by_field_name("body")?;
                let label = match kind {
                    "struct_specifier" => "struct",
                    "union_specifier" => "union",
                    "enum_specifier" => "enum",
                    _ => "class",
                };
                Some((label, name()?))
            }
            "type_definition" => {
                let declarator = node.child_by_field_name("declarator")?;
                Some(("typedef", declarator_name(declarator, source)?))
            }
            "namespace_definition" => Some((
                "namespace",
                name().unwrap_or_else(|| "(anonymous)".to_string()),
            )),
            _ => None,
        },
    }
}

/// The declared name inside a C/C++ declarator (`*f(int)` → `f`, `A::b()` → `A::b`).
fn declarator_name(node: Node, source: &[u8]) -> Option<String> {
    let mut current = node;
    for _ in 0..16 {
        match current.kind() {
            "identifier"
            | "field_identifier"
            | "type_identifier"
            | "qualified_identifier"
            | "destructor_name"
            | "operator_name"
            | "primitive_type" => {
                return Some(text(current, source).into_owned());
            }
            _ => {}
        }
        current = match current.child_by_field_name("declarator") {
            Some(inner) => inner,
            None => {
                let mut cursor = current.walk();
                let next = current.named_children(&mut cursor).find(|c| {
                    c.kind().ends_with("declarator")
                        || matches!(
                            c.kind(),
                            "identifier" | "field_identifier" | "qualified_identifier"
                        )
                });
                next?
            }
        };
    }
    None
}

fn render(symbols: &[Symbol]) -> String {
    let mut out = String::new();
    for s in symbols {
        let indent = "  ".repeat(s.depth + 1);
        let lines = if s.start_line == s.end_line {
            format!("L{}", s.start_line)
        } else {
            format!("L{}-{}", s.start_line, s.end_line)
        };
        out.push_str(&format!("{indent}{} {} ({lines})\n", s.kind, s.name));
    }
    out
}

#[derive(Deserialize)]
struct OutlineArgs {
    path: String,
}

pub struct OutlineTool;

impl Tool for OutlineTool {
    fn name(&self) -> &'static str {
        "outline"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: format!(
                "List the definitions in source code (functions, methods, classes, structs, \
                 traits, interfaces, types…) with their line ranges, nested by container. \
                 Supports Rust, Python, JavaScript, TypeScript/TSX, Go, C and C++. `path` is a \
                 file, or a directory (its supported files, .gitignore respected, at most \
                 {OUTLINE_MAX_FILES}). Use it to find where something is defined, then \
                 read_file with offset/limit."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Source file or directory, relative to the workspace root."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, _args: &serde_json::Value, _ctx: &ToolContext) -> ApprovalNeed {
        ApprovalNeed::None
    }

    fn title(&self, args: &serde_json::Value) -> String {
        format!("outline {}", args["path"].as_str().unwrap_or("?"))
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        run_blocking(ctx, move |ctx| into_result(outline(&args, ctx)))
    }
}

/// Outlines the file `abs` (a real path beneath the workspace `anchor`), opened by the one
/// untrusted-file reader: a link, FIFO or device swapped in after the check is refused, not
/// followed or waited on.
fn outline_file(
    anchor: &crate::untrusted_fs::Dir,
    abs: &Path,
    rel: &str,
) -> Result<String, ToolError> {
    let language = Language::of_path(abs).ok_or_else(|| ToolError::UnsupportedLanguage {
        path: rel.to_string(),
    })?;
    let inside = anchor.relative(abs).ok_or(ToolError::Internal {
        what: "a checked path is not beneath the workspace root",
    })?;
    let (file, meta) = match anchor.open_regular(inside) {
        Ok(Some(opened)) => opened,
        Ok(None) => {
            return Err(ToolError::NotFound {
                path: rel.to_string(),
                what: "no such file or directory",
            });
        }
        Err(e) if crate::untrusted_fs::not_regular_kind(&e).is_some() => {
            return Err(ToolError::rejected(format!(
                "{rel} is not a regular file; outline reads regular files only"
            )));
        }
        Err(e) => return Err(ToolError::io(IoOp::Open, rel, e)),
    };
    if meta.len > OUTLINE_MAX_FILE_BYTES {
        return Err(ToolError::TooLargeToOutline {
            path: rel.to_string(),
            bytes: meta.len,
        });
    }
    let source = {
        use std::io::Read;
        let mut data = Vec::new();
        file.take(OUTLINE_MAX_FILE_BYTES + 1)
            .read_to_end(&mut data)
            .map_err(|e| ToolError::io(IoOp::Read, rel, e))?;
        data
    };
    let symbols = outline_source(language, &source)?;
    let lines = source.iter().filter(|&&b| b == b'\n').count();
    let mut out = format!("{rel} ({}, {lines} lines)\n", language.name());
    if symbols.is_empty() {
        out.push_str("  (no definitions found)\n");
    }
    out.push_str(&render(&symbols));
    Ok(out)
}

fn outline(args: &serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
    let args: OutlineArgs = parse_args("outline", args)?;
    let rules = crate::tool::path::tool_rules(&ctx.workspace);
    let target = crate::tool::path::resolve_visible(&ctx.workspace, &args.path, &rules)?;
    let skip = rules.hidden().clone();
    // A folder's outline walks it by path: on a thread the kernel keeps to the workspace.
    crate::tool::confined::walk_confined(&ctx.workspace, || {
        outline_target(&target, &ctx.workspace, skip)
    })?
}

/// The outline of the checked path `target`: one file, or the supported files of a folder.
/// What `skip` hides (credentials the sandbox hides from commands, baton's own configuration)
/// is left out of a folder's walk.
fn outline_target(
    target: &WorkspacePath,
    workspace: &Path,
    skip: crate::sandbox::visibility::Hidden,
) -> Result<String, ToolError> {
    let anchor = crate::untrusted_fs::Dir::open(workspace)
        .map_err(|e| ToolError::io(IoOp::Open, workspace.display().to_string(), e))?;
    if target.abs.is_file() {
        return outline_file(&anchor, &target.abs, &target.rel);
    }
    if !target.abs.is_dir() {
        return Err(ToolError::NotFound {
            path: target.rel.clone(),
            what: "no such file or directory",
        });
    }
    let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    crate::tool::search::refuse_a_blocking_walk(&target.abs, &root)?;
    let mut files: Vec<_> = ignore::WalkBuilder::new(&target.abs)
        .require_git(false)
        .filter_entry(move |e| skip.hides(e.path()).is_none() && crate::tool::search::walkable(e))
        .build()
        .flatten()
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(|e| e.into_path())
        .filter(|p| Language::of_path(p).is_some())
        .collect();
    files.sort();
    if files.is_empty() {
        return Ok(format!("{}: no supported source files", target.rel));
    }
    let mut out = String::new();
    for file in files.iter().take(OUTLINE_MAX_FILES) {
        let rel = display_relative(file.strip_prefix(&root).unwrap_or(file));
        match outline_file(&anchor, file, &rel) {
            Ok(text) => out.push_str(&text),
            Err(e) => out.push_str(&format!("{e}\n")),
        }
    }
    if files.len() > OUTLINE_MAX_FILES {
        out.push_str(&format!(
            "[{} more files not outlined; outline a subdirectory]\n",
            files.len() - OUTLINE_MAX_FILES
        ));
    }
    Ok(cap_text(out, OUTPUT_CAP))
}
