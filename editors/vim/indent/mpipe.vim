" Vim indent file
" Language:    Mpipe (*.mpipe)
" Maintainer:  mpipec contributors
" One shiftwidth per open `{`, `[` or `(`; a line that starts with a closer goes back one.
" Brackets inside strings and comments do not count.

if exists('b:did_indent')
  finish
endif
let b:did_indent = 1

setlocal autoindent nosmartindent nocindent
setlocal indentexpr=GetMpipeIndent(v:lnum)
setlocal indentkeys=0{,0},0),0],!^F,o,O

let b:undo_indent = 'setlocal autoindent< smartindent< cindent< indentexpr< indentkeys<'

if exists('*GetMpipeIndent')
  finish
endif

let s:cpo_save = &cpo
set cpo&vim

" Openers on line `lnum` that the same line does not close, less the closers that close an
" earlier line's opener (a line's leading closers are counted by its own indent already).
" Strings and comments do not count.
function! s:OpenCount(lnum) abort
  let line = getline(a:lnum)
  let depth = 0
  let closed = 0
  let leading = 1
  let i = 0
  let n = strlen(line)
  " a line that starts inside a block comment starts in it
  let in_comment = s:InBlockComment(a:lnum, 1)
  while i < n
    let c = line[i]
    if in_comment
      if c ==# '*' && line[i + 1] ==# '/'
        let in_comment = 0
        let i += 1
      endif
    elseif c ==# '/' && line[i + 1] ==# '/'
      break
    elseif c ==# '/' && line[i + 1] ==# '*'
      let in_comment = 1
      let i += 1
    elseif c ==# '"'
      let i += 1
      while i < n && line[i] !=# '"'
        let i += line[i] ==# '\' ? 2 : 1
      endwhile
    elseif c =~# '[{[(]'
      let depth += 1
    elseif c =~# '[}\])]'
      if depth > 0
        let depth -= 1
      elseif !leading
        let closed += 1
      endif
    endif
    if c !~# '[ \t}\])]'
      let leading = 0
    endif
    let i += 1
  endwhile
  return depth - closed
endfunction

" Whether column `col` of line `lnum` lies inside a /* */ comment (syntax-based when
" highlighting is on, else by scanning the file's start).
function! s:InBlockComment(lnum, col) abort
  if exists('b:current_syntax') && b:current_syntax ==# 'mpipe'
    for id in synstack(a:lnum, a:col)
      if synIDattr(id, 'name') ==# 'mpipeBlockComment'
        return 1
      endif
    endfor
    return 0
  endif
  let text = join(getline(1, a:lnum - 1), "\n") . "\n" . strpart(getline(a:lnum), 0, a:col - 1)
  let text = substitute(text, '"\%([^"\\\n]\|\\.\)*"', '', 'g')
  let text = substitute(text, '//[^\n]*', '', 'g')
  return strridx(text, '/*') > strridx(text, '*/')
endfunction

function! GetMpipeIndent(lnum) abort
  let line = getline(a:lnum)
  " the inside of a block comment keeps the indentation it has
  if s:InBlockComment(a:lnum, max([1, match(line, '\S') + 1])) && line !~# '^\s*/\*'
    return -1
  endif
  let prev = prevnonblank(a:lnum - 1)
  " a block comment's lines do not set the indentation: the line where it started does
  while prev > 1 && getline(prev) !~# '^\s*/\*' && s:InBlockComment(prev, 1)
    let prev = prevnonblank(prev - 1)
  endwhile
  if prev == 0
    return 0
  endif
  let ind = indent(prev) + shiftwidth() * s:OpenCount(prev)
  if line =~# '^\s*[}\])]'
    let ind -= shiftwidth()
  endif
  return max([0, ind])
endfunction

let &cpo = s:cpo_save
unlet s:cpo_save
