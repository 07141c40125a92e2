//! The standard tool set (files, search, outline, git, plan) as one registry. The shell tools
//! are registered next to these by the agent.

use std::sync::Arc;

use super::ToolRegistry;
use super::fs::{EditTool, ReadFileTool, WriteFileTool};
use super::git::GitTool;
use super::outline::OutlineTool;
use super::patch::ApplyPatchTool;
use super::plan::UpdatePlanTool;
use super::search::{GlobTool, GrepTool, ListDirTool};

/// Every non-shell tool: read_file, write_file, edit, apply_patch, list_dir, glob, grep,
/// outline, git, update_plan.
pub fn standard_tools() -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    registry.register(Arc::new(ReadFileTool));
    registry.register(Arc::new(WriteFileTool));
    registry.register(Arc::new(EditTool));
    registry.register(Arc::new(ApplyPatchTool));
    registry.register(Arc::new(ListDirTool));
    registry.register(Arc::new(GlobTool));
    registry.register(Arc::new(GrepTool));
    registry.register(Arc::new(OutlineTool));
    registry.register(Arc::new(GitTool));
    registry.register(Arc::new(UpdatePlanTool));
    registry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_schema_and_a_description() {
        let registry = standard_tools();
        assert_eq!(registry.names().len(), 10);
        for spec in registry.specs() {
            assert!(spec.description.len() > 40, "{}", spec.name);
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        }
    }
}
