; Scopes and names for tree-sitter's local-variable highlighting and for editors that resolve
; names: a definition's name is visible in the whole file, parts of the model are referenced
; by the cut.
(source_file) @local.scope

(definition
  name: (identifier) @local.definition)

(use_declaration
  import: (identifier) @local.definition)

(use_group
  (identifier) @local.definition)

(instance
  name: (identifier) @local.reference)

(field
  value: (identifier) @local.reference)

(segment
  part: (identifier) @local.reference)
