;; Highlights for .mpipe, with the common tree-sitter capture names.
;;
;; Patterns never overlap, so the result does not depend on whether an editor lets the first
;; or the last matching pattern win. The lists of built-in names mirror mpipec's tables
;; (skeleton::NAMES, owner::STRATEGIES, spec::TARGETS, units::UNITS); tests/editors.rs checks
;; that every `#any-of?` / `#not-any-of?` list below equals its table.

;; ---- comments and literals ---------------------------------------------------------------

[
  (line_comment)
  (block_comment)
] @comment

(string) @string

(escape_sequence) @string.escape

(boolean) @boolean

(number) @number

(integer) @number

;; A unit mpipec knows, and one it rejects.
((unit) @type.builtin
  (#any-of? @type.builtin
    "B" "KB" "MB" "GB" "TB" "KiB" "MiB" "GiB" "TiB"
    "B/s" "KB/s" "MB/s" "GB/s" "TB/s" "GiB/s" "TiB/s" "Gbit/s" "Tbit/s"
    "ns" "us" "ms" "s"
    "GFLOP/s" "TFLOP/s" "PFLOP/s"
    "FLOP" "GFLOP" "TFLOP" "PFLOP"))

((unit) @type
  (#not-any-of? @type
    "B" "KB" "MB" "GB" "TB" "KiB" "MiB" "GiB" "TiB"
    "B/s" "KB/s" "MB/s" "GB/s" "TB/s" "GiB/s" "TiB/s" "Gbit/s" "Tbit/s"
    "ns" "us" "ms" "s"
    "GFLOP/s" "TFLOP/s" "PFLOP/s"
    "FLOP" "GFLOP" "TFLOP" "PFLOP"))

;; ---- keywords ----------------------------------------------------------------------------

"use" @keyword.import

[
  "hardware"
  "encoder"
  "decoder"
  "model"
] @keyword.type

[
  "cluster"
  "batch"
  "cut"
  "schedule"
  "owner"
  "target"
] @keyword

;; ---- imports -----------------------------------------------------------------------------

(module_path
  (identifier) @module)

(use_declaration
  import: (identifier) @type)

(use_group
  (identifier) @type)

;; ---- definitions and blocks --------------------------------------------------------------

(definition
  name: (identifier) @type.definition)

(field
  key: (key) @property)

(sub_block
  key: (key) @property)

(instance
  name: (identifier) @type)

(field
  value: (identifier) @variable)

(list
  (identifier) @variable)

;; ---- the algebra -------------------------------------------------------------------------

(segment
  part: (identifier) @variable.member)

((skeleton_name) @function.builtin
  (#any-of? @function.builtin
    "gpipe" "1f1b" "interleaved" "zb1p" "zbv" "dualpipev" "transpose"))

((skeleton_name) @function
  (#not-any-of? @function
    "gpipe" "1f1b" "interleaved" "zb1p" "zbv" "dualpipev" "transpose"))

(argument
  key: (key) @variable.parameter)

(argument
  value: (identifier) @constant)

(owner_statement
  owner: (identifier) @constant.builtin
  (#any-of? @constant.builtin
    "by_microbatch" "round_robin" "adaptive"))

(owner_statement
  owner: (identifier) @constant
  (#not-any-of? @constant
    "by_microbatch" "round_robin" "adaptive"))

((target_name) @constant.builtin
  (#any-of? @constant.builtin
    "torch" "megatron" "mindformers" "mindspeed-mm" "hyperparallel"))

((target_name) @constant
  (#not-any-of? @constant
    "torch" "megatron" "mindformers" "mindspeed-mm" "hyperparallel"))

;; ---- operators and punctuation -----------------------------------------------------------

[
  "|"
  "+"
  ".."
  "="
] @operator

[
  "::"
  ";"
  ","
] @punctuation.delimiter

[
  "{"
  "}"
  "["
  "]"
  "("
  ")"
] @punctuation.bracket
