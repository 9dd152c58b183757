" Headless check of the Vim support for .mpipe files. Run from anywhere:
"
"   vim -Nu NONE -i NONE -Es -c "let g:mpipe_results = 'results.txt'" -S editors/vim/test/check.vim
"
" It puts editors/vim on 'runtimepath', opens test/sample.mpipe and checks every assertion
" comment in it: `//   ^ mpipeKey` names the syntax group expected at the caret's column on
" the nearest line above that is not an assertion (`// <- group`: at the first column). Then
" it checks the filetype plugin's options, and that re-indenting test/indent.mpipe and the plans in
" g:mpipe_indent_files (a list of paths; the repository's examples by default) reproduces
" them (lines inside block comments keep their indentation). Every result goes to g:mpipe_results (default: check-results.txt in the current
" directory); Vim exits 0 when everything passed, 1 otherwise.

let s:here = expand('<sfile>:p:h')
let s:vimdir = fnamemodify(s:here, ':h')
let s:repo = fnamemodify(s:vimdir, ':h:h')
let s:out = get(g:, 'mpipe_results', 'check-results.txt')
let s:lines = []
let s:passed = 0
let s:failed = 0

function! s:Result(ok, what) abort
  if a:ok
    let s:passed += 1
    call add(s:lines, 'ok   ' . a:what)
  else
    let s:failed += 1
    call add(s:lines, 'FAIL ' . a:what)
  endif
endfunction

function! s:Finish() abort
  call add(s:lines, printf('%d passed, %d failed', s:passed, s:failed))
  call writefile(s:lines, s:out)
  if s:failed > 0
    cquit!
  endif
  qall!
endfunction

try
  " leave nothing behind: no swap files beside the files, no viminfo
  set noswapfile viminfo= nobackup nowritebackup noundofile
  let &runtimepath = s:vimdir . ',' . &runtimepath
  filetype plugin indent on
  syntax on

  " ---- syntax groups at the sample's assertions ----------------------------------------
  let s:sample = s:here . '/sample.mpipe'
  execute 'edit ' . fnameescape(s:sample)
  call s:Result(&filetype ==# 'mpipe', 'ftdetect: filetype is "' . &filetype . '"')
  call s:Result(get(b:, 'current_syntax', '') ==# 'mpipe', 'syntax: b:current_syntax is set')

  let s:assertion = '^\s*//\(\s*<-\|\s*\^\+\)\s\+\(\w\+\)\s*$'
  let s:target = 0
  let s:count = 0
  for s:lnum in range(1, line('$'))
    let s:text = getline(s:lnum)
    let s:m = matchlist(s:text, s:assertion)
    if empty(s:m)
      if s:text =~# '\S'
        let s:target = s:lnum
      endif
      continue
    endif
    let s:count += 1
    let s:col = s:m[1] =~# '<-' ? 1 : stridx(s:text, '^') + 1
    let s:want = s:m[2]
    let s:got = synIDattr(synID(s:target, s:col, 1), 'name')
    call s:Result(s:target > 0 && s:got ==# s:want,
          \ printf('syntax %d:%d want %s got %s  | %s', s:target, s:col, s:want,
          \ s:got ==# '' ? '(none)' : s:got, strpart(getline(s:target), s:col - 1, 24)))
  endfor
  call s:Result(s:count > 0, printf('syntax: %d assertions read', s:count))

  " ---- filetype plugin -----------------------------------------------------------------
  call s:Result(&l:commentstring ==# '// %s', 'ftplugin: commentstring is "' . &l:commentstring . '"')
  call s:Result(&l:comments =~# '://' && &l:comments =~# 's1:/\*', 'ftplugin: comments is "' . &l:comments . '"')
  call s:Result(&l:shiftwidth == 4 && &l:expandtab, 'ftplugin: shiftwidth=4 expandtab')
  call s:Result(&l:indentexpr =~# 'GetMpipeIndent', 'indent: indentexpr is "' . &l:indentexpr . '"')

  " ---- indentation: re-indenting reproduces canonically indented files -----------------
  let s:files = get(g:, 'mpipe_indent_files',
        \ [s:here . '/indent.mpipe'] + glob(s:repo . '/examples/**/*.mpipe', 0, 1) + glob(s:repo . '/stdlib/*.mpipe', 0, 1))
  for s:file in s:files
    execute 'edit! ' . fnameescape(s:file)
    let s:before = getline(1, '$')
    " strip every line's indentation, except inside block comments, whose lines keep theirs
    for s:l in range(1, line('$'))
      let s:first = match(getline(s:l), '\S') + 1
      if s:first > 0 && (getline(s:l) =~# '^\s*/\*'
            \ || synIDattr(synID(s:l, s:first, 1), 'name') !=# 'mpipeBlockComment')
        call setline(s:l, strpart(getline(s:l), s:first - 1))
      endif
    endfor
    silent normal! gg=G
    let s:after = getline(1, '$')
    let s:bad = filter(range(len(s:before)), 's:before[v:val] !=# s:after[v:val]')
    call s:Result(empty(s:bad), printf('indent %s%s', fnamemodify(s:file, ':~:.'),
          \ empty(s:bad) ? '' : printf(': line %d is "%s"', s:bad[0] + 1, s:after[s:bad[0]])))
    setlocal nomodified
  endfor
catch
  call s:Result(0, 'error: ' . v:exception . ' at ' . v:throwpoint)
endtry

call s:Finish()
