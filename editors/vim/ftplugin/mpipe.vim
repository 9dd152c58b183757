" Vim filetype plugin
" Language:    Mpipe (*.mpipe)
" Maintainer:  mpipec contributors

if exists('b:did_ftplugin')
  finish
endif
let b:did_ftplugin = 1

let s:cpo_save = &cpo
set cpo&vim

setlocal commentstring=//\ %s
setlocal comments=s1:/*,mb:*,ex:*/,://
setlocal formatoptions-=t formatoptions+=croql
setlocal shiftwidth=4 softtabstop=4 expandtab
setlocal suffixesadd=.mpipe

let b:undo_ftplugin = 'setlocal commentstring< comments< formatoptions< shiftwidth< softtabstop< expandtab< suffixesadd<'

let &cpo = s:cpo_save
unlet s:cpo_save
