#!/usr/bin/env bash
# Shell completion: the bash script is sourced and its function called as
# bash would call it (COMP_WORDS / COMP_CWORD set); the zsh script is checked
# with zsh when it is installed, else for its commands.
set -u
. "$(dirname "$0")/lib.sh"
W=$WORK/completion; rm -rf "$W"; mkdir -p "$W"

if $FF completion bash > "$W/fp4forge.bash" && [ -s "$W/fp4forge.bash" ]; then pass completion_bash_prints
else fail completion_bash_prints; fi
expect_rc completion_unknown_shell_is_usage 2 $FF completion fish

# the lines of stdin sorted, on one line (xargs would run `echo --help`)
words() { sort | tr '\n' ' ' | sed 's/ $//'; }
# complete WORDS...: the last word is the one being completed; prints COMPREPLY
complete_words() {
    bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _fp4forge; printf "%s\n" "${COMPREPLY[@]}"' \
        _ "$W/fp4forge.bash" "$@"
}
got=$(complete_words fp4forge qu)
if [ "$got" = quantize ]; then pass completion_bash_command "qu -> $got"; else fail completion_bash_command "got '$got'"; fi
got=$(complete_words fp4forge quantize --thr)
if [ "$got" = --threads ]; then pass completion_bash_option "--thr -> $got"; else fail completion_bash_option "got '$got'"; fi
got=$(complete_words fp4forge quantize --a | words)
if [ "$got" = "--allow-partial --allow-router-quantization --aux-from" ]; then pass completion_bash_options_many "$got"
else fail completion_bash_options_many "got '$got'"; fi
got=$(complete_words fp4forge doctor --schema "" | words)
if [ "$got" = "legacy per-layer" ]; then pass completion_bash_choices "$got"; else fail completion_bash_choices "got '$got'"; fi
# a folder argument is left to bash's file completion (-o default): no words
got=$(complete_words fp4forge plan som)
if [ -z "$got" ] && grep -q '^complete -o default -F _fp4forge fp4forge$' "$W/fp4forge.bash"; then
    pass completion_bash_files_default; else fail completion_bash_files_default "got '$got'"; fi

# every option of every command's --help is offered for that command
missing=
for c in $($FF --help | awk '/^commands:/{f=1; next} f && NF {print $1}'); do
    want=$($FF "$c" --help | grep -Eo '^  --[a-z0-9-]+' | tr -d ' ' | words)
    have=$(complete_words fp4forge "$c" -- | words)
    [ "$want" = "$have" ] || missing="$missing $c"
done
if [ -z "$missing" ]; then pass completion_bash_matches_help "every command"; else fail completion_bash_matches_help "$missing"; fi

$FF completion zsh > "$W/_fp4forge"
nm=
for c in $($FF --help | awk '/^commands:/{f=1; next} f && NF {print $1}'); do
    grep -q "^        '$c:" "$W/_fp4forge" && grep -q "^        $c)" "$W/_fp4forge" || nm="$nm $c"
done
if [ -s "$W/_fp4forge" ] && [ -z "$nm" ] && grep -q "'--threads\[" "$W/_fp4forge"; then
    pass completion_zsh_commands; else fail completion_zsh_commands "missing:$nm"; fi
if command -v zsh > /dev/null; then
    if zsh -n "$W/_fp4forge"; then pass completion_zsh_parses; else fail completion_zsh_parses; fi
else
    echo "SKIP completion_zsh_parses (zsh not installed)"
fi
exit $GOLDEN_RC
