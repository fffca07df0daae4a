package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/client"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestRunAgainstFerry runs the example against a real Ferry, signing with
// a key made over REST, as the README says to.
func TestRunAgainstFerry(t *testing.T) {
	secret := make([]byte, 32)
	_, err := rand.Read(secret)
	require.NoError(t, err)
	env := ferrytest.Start(t, func(c *server.Config) { c.SecretKey = base64.StdEncoding.EncodeToString(secret) })
	c := client.New(env.URL, ferrytest.AdminKey, client.WithHTTPClient(env.Client))
	key, err := c.CreateKey(context.Background(), client.KeyRequest{Name: "sqs-go", Permissions: []client.Permission{
		{Resource: "queue:invoices*", Actions: []string{"send", "receive", "read", "manage"}}}})
	require.NoError(t, err)
	t.Setenv("FERRY_URL", env.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", key.ID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", key.Secret)

	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	require.Equal(t, "invoice 7\n", out.String())
	_, err = c.GetQueue(context.Background(), "invoices.fifo")
	require.NoError(t, err, "the FIFO queue is a REST queue")
}

// goBlockRE finds the go blocks of a Markdown file.
var goBlockRE = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestDocsShowThisCode: every go block of the README and of docs/sqs.md
// is a passage of this example (compared line by line, indentation and
// blank lines aside), so the snippets compile and run as the test above
// runs them; the README's worker loop is examples/worker-go's instead
// (its test checks that block).
func TestDocsShowThisCode(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	code := lines(string(src))
	for _, doc := range []string{"../../README.md", "../../docs/sqs.md"} {
		md, err := os.ReadFile(doc)
		require.NoError(t, err)
		blocks := goBlockRE.FindAllStringSubmatch(string(md), -1)
		require.NotEmpty(t, blocks, "%s shows the Go client", doc)
		for _, b := range blocks {
			if doc == "../../README.md" && strings.Contains(b[1], "c.Work(") {
				continue // examples/worker-go's
			}
			require.Contains(t, code, lines(b[1]), "%s: a go block that is not a passage of examples/sqs-go/main.go", doc)
		}
	}
}

// lines is text with each line trimmed and blank lines left out, joined
// by newlines and ending in one.
func lines(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			b.WriteString(l + "\n")
		}
	}
	return "\n" + b.String()
}
