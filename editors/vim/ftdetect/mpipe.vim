" .mpipe files are Mpipe plans.
autocmd BufNewFile,BufRead *.mpipe setfiletype mpipe
