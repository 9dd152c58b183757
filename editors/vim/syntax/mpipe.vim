" Vim syntax file
" Language:    Mpipe: pipeline-parallel training plans for mpipec (*.mpipe)
" Maintainer:  mpipec contributors
" Follows grammar/mpipe.pest, the language's source of truth. tests/editors.rs checks the
" keywords and the skeleton, owner, target and unit names below against mpipec's tables.

if exists('b:current_syntax')
  finish
endif

let s:cpo_save = &cpo
set cpo&vim

syn case match
syn sync fromstart

" ---- comments ----------------------------------------------------------------------------
syn keyword mpipeTodo          contained TODO FIXME XXX NOTE
syn region  mpipeLineComment   start=+//+ end=+$+ keepend contains=mpipeTodo,@Spell
syn region  mpipeBlockComment  start=+/\*+ end=+\*/+ contains=mpipeTodo,@Spell fold
syn cluster mpipeComments      contains=mpipeLineComment,mpipeBlockComment

" ---- keywords (pest `keyword`) -----------------------------------------------------------
" Top level only: a block, an import path or an argument list never contains them, so
" `hardware = h100;` in a cluster is a field and `std::hardware::h100` a path.
syn keyword mpipeImport        use nextgroup=mpipeUseBody skipwhite skipnl skipempty
syn keyword mpipeDefinition    hardware encoder decoder model nextgroup=mpipeDefName skipwhite skipnl skipempty
syn keyword mpipeSection       cluster batch
syn keyword mpipeStatement     cut schedule owner target
syn keyword mpipeBoolean       contained true false

syn match   mpipeDefName       contained /\<\h\w*\>/

" ---- imports -----------------------------------------------------------------------------
syn region  mpipeUseBody       contained start=/\S\@=/ end=/;\@=/ contains=@mpipeComments,mpipeString,mpipePathSep,mpipeImportName,mpipeNamespace,mpipeUseGroup
syn match   mpipeImportName    contained /\<\h\w*\>/
syn match   mpipeNamespace     contained /\<\h\w*\>\ze\s*::/
syn match   mpipePathSep       contained /::/
syn region  mpipeUseGroup      contained matchgroup=mpipeBrace start=/{/ end=/}/ contains=@mpipeComments,mpipeImportName,mpipeComma fold

" ---- blocks and fields -------------------------------------------------------------------
syn region  mpipeBlock         matchgroup=mpipeBrace start=/{/ end=/}/ contains=@mpipeComments,mpipeKey,mpipeInstance,mpipeBlock,mpipeAssign,@mpipeValues,mpipeDelimiter fold
syn match   mpipeKey           contained /\<\h\w*\>\ze\s*\%(=\|{\)/
syn match   mpipeInstance      contained /\%(=\s*\)\@<=\<\h\w*\>\ze\s*{/
syn match   mpipeAssign        contained /=/

" ---- values ------------------------------------------------------------------------------
syn cluster mpipeValues        contains=mpipeList,mpipeString,mpipeBoolean,mpipeNumber,@mpipeComments
syn region  mpipeList          contained matchgroup=mpipeBracket start=/\[/ end=/\]/ contains=@mpipeValues,mpipeComma fold
syn region  mpipeString        start=+"+ end=+"+ end=+$+ contains=mpipeEscape
syn match   mpipeEscape        contained /\\\%(.\|$\)/
" pest `quantity`: a number and, with no space between, its unit
syn match   mpipeNumber        contained /\<\d\+\%(_\d\+\)*\%(\.\d\+\)\=\%([eE][+-]\=\d\+\)\=/ nextgroup=mpipeBadUnit,mpipeUnit
" Any other unit parses but mpipec rejects it. Defined first: mpipeUnit wins where both match.
syn match   mpipeBadUnit       contained /[A-Za-z%]\+\%(\/[A-Za-z]\+\)\=/
syn match   mpipeUnit          contained /\%(B\|KB\|MB\|GB\|TB\|KiB\|MiB\|GiB\|TiB\|B\/s\|KB\/s\|MB\/s\|GB\/s\|TB\/s\|GiB\/s\|TiB\/s\|Gbit\/s\|Tbit\/s\|ns\|us\|ms\|s\|GFLOP\/s\|TFLOP\/s\|PFLOP\/s\|FLOP\|GFLOP\|TFLOP\|PFLOP\)[A-Za-z%/]\@!/

" ---- the algebra -------------------------------------------------------------------------
" cut: `|` between regions, `+` inside one, `[a..b]` layer ranges (also `owner [0, 1]`)
syn match   mpipeOperator      /[|+]/
syn region  mpipeRange         matchgroup=mpipeBracket start=/\[/ end=/\]/ contains=@mpipeComments,mpipeInteger,mpipeRangeOp,mpipeComma
syn match   mpipeInteger       contained /\<\d\+\>/
syn match   mpipeRangeOp       contained /\.\./
" schedule: skeletons and their arguments
syn keyword mpipeSkeleton      gpipe 1f1b interleaved zb1p zbv dualpipev transpose
syn region  mpipeArgs          matchgroup=mpipeParen start=/(/ end=/)/ contains=@mpipeComments,mpipeParam,mpipeAssign,mpipeOption,@mpipeValues,mpipeComma
syn match   mpipeParam         contained /\<\h\w*\>\ze\s*==\@!/
syn keyword mpipeOption        contained slack prefix
" owner and target
syn keyword mpipeOwner         by_microbatch round_robin adaptive
syn match   mpipeTarget        /\<\%(torch\|megatron\|mindformers\|mindspeed-mm\|hyperparallel\)\>[-]\@!/

syn match   mpipeComma         contained /,/
syn match   mpipeDelimiter     /[;,]/

" ---- highlight links ---------------------------------------------------------------------
hi def link mpipeTodo          Todo
hi def link mpipeLineComment   Comment
hi def link mpipeBlockComment  Comment
hi def link mpipeImport        Include
hi def link mpipeDefinition    Structure
hi def link mpipeSection       Keyword
hi def link mpipeStatement     Statement
hi def link mpipeBoolean       Boolean
hi def link mpipeDefName       Type
hi def link mpipeImportName    Type
hi def link mpipeNamespace     PreProc
hi def link mpipePathSep       Delimiter
hi def link mpipeKey           Identifier
hi def link mpipeInstance      Type
hi def link mpipeAssign        Operator
hi def link mpipeString        String
hi def link mpipeEscape        SpecialChar
hi def link mpipeNumber        Number
hi def link mpipeUnit          Special
hi def link mpipeBadUnit       Error
hi def link mpipeOperator      Operator
hi def link mpipeInteger       Number
hi def link mpipeRangeOp       Operator
hi def link mpipeSkeleton      Function
hi def link mpipeParam         Identifier
hi def link mpipeOption        Constant
hi def link mpipeOwner         Constant
hi def link mpipeTarget        Constant
hi def link mpipeBrace         Delimiter
hi def link mpipeBracket       Delimiter
hi def link mpipeParen         Delimiter
hi def link mpipeComma         Delimiter
hi def link mpipeDelimiter     Delimiter

let b:current_syntax = 'mpipe'

let &cpo = s:cpo_save
unlet s:cpo_save
