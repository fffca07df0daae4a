package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// testCLICompletion: the bash completion script completes nouns, verbs
// and flags.
func testCLICompletion(t *testing.T, r *cliRun) {
	script := r.ok(t, "", "completion", "bash")
	check := func(words string, cword int, want string) {
		probe := script + "\nCOMP_WORDS=(" + words + "); COMP_CWORD=" + string(rune('0'+cword)) + "; _ferry; echo \"${COMPREPLY[*]}\"\n"
		out, err := exec.Command("bash", "-c", probe).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, want, strings.TrimSpace(string(out)), "completing %s", words)
	}
	check(`ferry q`, 1, "queue")
	check(`ferry queue ""`, 2, "create dead-letters delete get ls peek purge receive send")
	check(`ferry queue dead-letters r`, 3, "redrive")
	check(`ferry topic t`, 2, "tail")
	check(`ferry queue get orders --o`, 4, "--output")
	_, _, code := r.run(t, "", "completion", "fish")
	require.Equal(t, 2, code)
}
