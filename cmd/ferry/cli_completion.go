package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// completion prints the completion script for the shell args names: bash
// (zsh loads the same with bashcompinit).
func completion(args []string, out io.Writer) error {
	if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
		return usagef("usage: ferry completion bash|zsh  (e.g. source <(ferry completion bash))")
	}
	next := map[string]map[string]bool{"": {"serve": true, "dev": true, "migrate": true, "version": true, "completion": true}}
	for _, c := range commands() {
		words := strings.Fields(c.path)
		for i := range words {
			prefix := strings.Join(words[:i], " ")
			if next[prefix] == nil {
				next[prefix] = map[string]bool{}
			}
			next[prefix][words[i]] = true
		}
	}
	next["completion"] = map[string]bool{"bash": true, "zsh": true}
	prefixes := make([]string, 0, len(next))
	for p := range next {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	var b strings.Builder
	if args[0] == "zsh" {
		b.WriteString("autoload -U +X bashcompinit && bashcompinit\n")
	}
	b.WriteString(`_ferry() {
	local cur=${COMP_WORDS[COMP_CWORD]} path="" w words
	for w in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
		case "$w" in -*) ;; *) path="${path:+$path }$w" ;; esac
	done
	case "$path" in
`)
	for _, p := range prefixes {
		words := make([]string, 0, len(next[p]))
		for w := range next[p] {
			words = append(words, w)
		}
		sort.Strings(words)
		fmt.Fprintf(&b, "\t\t%q) words=%q ;;\n", p, strings.Join(words, " "))
	}
	b.WriteString(`		*) words="--output --url --api-key --help" ;;
	esac
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -F _ferry ferry
`)
	_, err := io.WriteString(out, b.String())
	return err
}
