/**
 * @file The .mpipe language: pipeline-parallel training plans for mpipec.
 * @license Apache-2.0
 *
 * A transcription of grammar/mpipe.pest, which stays the source of truth: every rule below
 * names the pest rule it mirrors. Where pest uses a negative lookahead on keywords, this
 * grammar uses tree-sitter's reserved-word sets (tree-sitter 0.25+).
 */

/// <reference types="tree-sitter-cli/dsl" />
// @ts-check

// pest `keyword`: never an `ident`.
const KEYWORDS = [
  'use', 'hardware', 'encoder', 'decoder', 'model', 'cluster', 'batch',
  'cut', 'schedule', 'owner', 'target', 'true', 'false',
];

// pest `key`: field names may be `hardware`, `true` or `false`, but not a statement keyword.
const KEY_RESERVED = [
  'use', 'encoder', 'decoder', 'model', 'cluster', 'batch', 'cut', 'schedule', 'owner', 'target',
];

/**
 * One or more `rule`, separated by `sep`.
 * @param {RuleOrLiteral} sep
 * @param {RuleOrLiteral} rule
 */
function sep1(sep, rule) {
  return seq(rule, repeat(seq(sep, rule)));
}

/**
 * pest's `(x ~ ("," ~ x)* ~ ","?)?` inside brackets.
 * @param {RuleOrLiteral} rule
 */
function commaList(rule) {
  return optional(seq(sep1(',', rule), optional(',')));
}

module.exports = grammar({
  name: 'mpipe',

  // pest WHITESPACE and COMMENT
  extras: $ => [/[ \t\r\n]/, $.line_comment, $.block_comment],

  word: $ => $.identifier,

  // The first set applies everywhere; `reserved(name, rule)` narrows it. Where a key and a
  // value may both come next (an argument), the later-declared `key` set applies, and a
  // keyword token that the state accepts is always that keyword: `f(hardware)` parses here
  // but not with pest, `f(true = 1)` with pest but not here. No real plan writes either.
  reserved: {
    global: _ => KEYWORDS,
    key: _ => KEY_RESERVED,
  },

  // `a::b::c`: only the token after `b` tells whether `b` is the last path segment.
  conflicts: $ => [[$.module_path]],

  rules: {
    // file = { SOI ~ item* ~ EOI }
    source_file: $ => repeat($._item),

    _item: $ => choice(
      $.use_declaration,
      $.definition,
      $.section,
      $.cut_statement,
      $.schedule_statement,
      $.owner_statement,
      $.target_statement,
    ),

    // ---- imports -------------------------------------------------------------------------
    // use_decl = { kw_use ~ (string | module_path) ~ "::" ~ (use_group | ident) ~ ";" }
    use_declaration: $ => seq(
      'use',
      field('path', choice($.string, $.module_path)),
      '::',
      field('import', choice($.use_group, $.identifier)),
      ';',
    ),

    // module_path = { word ~ ("::" ~ word ~ &"::")* }: any word, keywords included
    // (`std::hardware::h100`); the imported name after the last `::` is an `ident`.
    module_path: $ => sep1('::', choice($.identifier, ...KEYWORDS.map(k => alias(k, $.identifier)))),

    // use_group = { "{" ~ (ident ~ ("," ~ ident)* ~ ","?)? ~ "}" }
    use_group: $ => seq('{', commaList($.identifier), '}'),

    // ---- definitions and sections --------------------------------------------------------
    // definition = { def_kind ~ ident ~ block }
    definition: $ => seq(
      field('kind', choice('hardware', 'encoder', 'decoder', 'model')),
      field('name', $.identifier),
      field('body', $.block),
    ),

    // section = { section_kind ~ block }
    section: $ => seq(field('kind', choice('cluster', 'batch')), field('body', $.block)),

    // block = { "{" ~ (field | sub_block)* ~ "}" }
    block: $ => seq('{', repeat(choice($.field, $.sub_block)), '}'),

    // field = { key ~ "=" ~ (instance ~ ";"? | value ~ ";") }
    field: $ => seq(
      field('key', $._key),
      '=',
      choice(
        seq(field('value', $.instance), optional(';')),
        seq(field('value', $._value), ';'),
      ),
    ),

    // sub_block = { key ~ block }
    sub_block: $ => seq(field('key', $._key), field('body', $.block)),

    // instance = { ident ~ block }
    instance: $ => seq(field('name', $.identifier), field('body', $.block)),

    // value = _{ list | string | boolean | quantity | name }
    _value: $ => choice($.list, $.string, $.boolean, $.quantity, $.identifier),

    // list = { "[" ~ (value ~ ("," ~ value)* ~ ","?)? ~ "]" }
    list: $ => seq('[', commaList($._value), ']'),

    // quantity = ${ number ~ unit? }: no space between the number and its unit
    quantity: $ => seq(field('number', $.number), optional(field('unit', $.unit))),

    // number = @{ digits ("_" digits)* ("." digits)? (^"e" ("+" | "-")? digits)? }
    number: _ => /[0-9]+(_[0-9]+)*(\.[0-9]+)?([eE][+-]?[0-9]+)?/,

    // unit = @{ (ASCII_ALPHA | "%")+ ~ ("/" ~ ASCII_ALPHA+)? }
    unit: _ => token.immediate(/[A-Za-z%]+(\/[A-Za-z]+)?/),

    // boolean = @{ ("true" | "false") ~ !ident_char }
    boolean: _ => choice('true', 'false'),

    // string = @{ "\"" ~ (!("\"" | "\\" | "\n") ~ ANY | "\\" ~ ANY)* ~ "\"" }
    string: $ => seq(
      '"',
      repeat(choice($._string_content, $.escape_sequence)),
      token.immediate('"'),
    ),
    _string_content: _ => token.immediate(prec(1, /[^"\\\n]+/)),
    escape_sequence: _ => token.immediate(/\\(.|\n)/),

    // ---- the algebra ---------------------------------------------------------------------
    // cut_stmt = { kw_cut ~ region ~ ("|" ~ region)* ~ ";" }
    cut_statement: $ => seq('cut', sep1('|', $.region), ';'),

    // region = { segment ~ ("+" ~ segment)* }
    region: $ => sep1('+', $.segment),

    // segment = { ident ~ layer_range? }
    segment: $ => seq(field('part', $.identifier), optional(field('layers', $.layer_range))),

    // layer_range = { "[" ~ integer ~ ".." ~ integer ~ "]" }
    layer_range: $ => seq('[', field('start', $.integer), '..', field('end', $.integer), ']'),

    // integer = @{ ASCII_DIGIT+ }
    integer: _ => /[0-9]+/,

    // schedule_stmt = { kw_schedule ~ skeleton ~ ("," ~ skeleton)* ~ ";" }
    schedule_statement: $ => seq('schedule', sep1(',', $.skeleton), ';'),

    // skeleton = { skeleton_name ~ args? }
    skeleton: $ => seq(field('name', $.skeleton_name), optional(field('arguments', $.arguments))),

    // skeleton_name = @{ (ASCII_ALPHANUMERIC | "_")+ }: `1f1b` starts with a digit
    skeleton_name: _ => /[A-Za-z0-9_]+/,

    // args = { "(" ~ (arg ~ ("," ~ arg)* ~ ","?)? ~ ")" }
    arguments: $ => seq('(', commaList($.argument), ')'),

    // arg = { (key ~ "=" ~ !"=")? ~ value }
    argument: $ => seq(optional(seq(field('key', $._key), '=')), field('value', $._value)),

    // owner_stmt = { kw_owner ~ (list | name) ~ ";" }
    owner_statement: $ => seq('owner', field('owner', choice($.list, $.identifier)), ';'),

    // target_stmt = { kw_target ~ target_name ~ ("," ~ target_name)* ~ ";" }
    target_statement: $ => seq('target', sep1(',', $.target_name), ';'),

    // target_name = @{ ASCII_ALPHA ~ (ASCII_ALPHANUMERIC | "_" | "-")* }
    target_name: _ => /[A-Za-z][A-Za-z0-9_-]*/,

    // ---- words ---------------------------------------------------------------------------
    // key = @{ !(statement keyword ~ !ident_char) ~ word }
    _key: $ => reserved('key', alias($.identifier, $.key)),

    // ident = @{ !keyword ~ (ASCII_ALPHA | "_") ~ ident_char* }
    identifier: _ => /[A-Za-z_][A-Za-z0-9_]*/,

    // line_comment = _{ "//" ~ (!"\n" ~ ANY)* }
    line_comment: _ => token(seq('//', /[^\n]*/)),

    // block_comment = _{ "/*" ~ (!"*/" ~ ANY)* ~ "*/" }: not nested
    block_comment: _ => token(seq('/*', /[^*]*\*+([^/*][^*]*\*+)*/, '/')),
  },
});
