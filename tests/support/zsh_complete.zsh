# Drives zsh's own completion of tjob in a pseudo-terminal, as a user's Tab
# would:  zsh -f zsh_complete.zsh FPATH_DIR BIN_DIR 'tjob lo' 'tjob logs'
# Types the line and a Tab, then waits until the text zsh draws matches the
# pattern (the caller's deadline ends it otherwise) and prints that text.
zmodload zsh/zpty || exit 2
local fdir=$1 bindir=$2 line=$3 want=$4
zpty z zsh -f -i
zpty -w z "PS1='> '; fpath=(${(q)fdir} \$fpath); autoload -U compinit; compinit -u -D; path=(${(q)bindir} \$path); echo READY"
zpty -r z out '*READY*' || exit 1
zpty -w -n z "$line"$'\t'
zpty -r z out "*${want}*" || exit 1
print -r -- "$out"
zpty -d z
