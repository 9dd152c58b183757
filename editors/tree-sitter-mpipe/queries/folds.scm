; Fold blocks, multi-line lists and argument lists, import groups and block comments.
[
  (block)
  (list)
  (arguments)
  (use_group)
  (block_comment)
] @fold
