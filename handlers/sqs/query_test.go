package sqs_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// debianPython is the interpreter Debian's python3-boto3 installs boto3
// for; .ci/run installs the package when it lacks boto3.
const debianPython = "/usr/bin/python3"

// TestBoto3QueryProtocol runs a second real client, Debian's boto3 (1.26,
// which speaks the Query protocol), through FIFO sends with every
// attribute type, a batch with a refused entry, receive,
// ChangeMessageVisibility 0, a batch delete, tags, attributes, a typed
// error and DeleteQueue (testdata/boto3_query.py), and checks what it saw.
func TestBoto3QueryProtocol(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command(debianPython, "-c", "import boto3").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import boto3 (%v: %s): apt-get install python3-boto3, as .ci/run does", debianPython, err, out)
	}
	env := start(t)
	cmd := exec.Command(debianPython, "testdata/boto3_query.py")
	cmd.Env = append(os.Environ(), "FERRY_URL="+env.URL, "AWS_ACCESS_KEY_ID=admin", "AWS_SECRET_ACCESS_KEY="+ferrytest.AdminKey,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_SESSION_TOKEN=", "NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1")
	raw, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("boto3 script failed: %v\n%s", err, exit.Stderr)
	}
	require.NoError(t, err)
	var out struct {
		Boto3, URL, Body, Group, Missing string
		MD5BodyOK                        bool     `json:"md5_body_ok"`
		BatchOK                          []string `json:"batch_ok"`
		BatchFailed                      [][]any  `json:"batch_failed"`
		Attrs                            map[string]string
		Again, Deleted                   []string
		Tags                             map[string]string
		QueueAttrs                       map[string]string `json:"queue_attrs"`
		ListedAfterDelete                []string          `json:"listed_after_delete"`
	}
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	t.Logf("boto3 %s", out.Boto3)
	require.Equal(t, queueURL(env, "boto.fifo"), out.URL)
	require.True(t, out.MD5BodyOK)
	require.Equal(t, []string{"a"}, out.BatchOK)
	require.Equal(t, [][]any{{"bad", "InvalidParameterValue", true}}, out.BatchFailed)
	require.Equal(t, "invoice 7 ✓", out.Body)
	require.Equal(t, map[string]string{"s": "plain ✓", "n": "-1.5", "b": "0001ff"}, out.Attrs)
	require.Equal(t, "g", out.Group)
	require.Equal(t, []string{"invoice 7 ✓"}, out.Again, "visible again at once; the group's next waits behind it")
	require.Equal(t, []string{"1"}, out.Deleted)
	require.Equal(t, map[string]string{"team": "billing", "env": "test"}, out.Tags)
	require.Equal(t, map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true", "ReceiveMessageWaitTimeSeconds": "1"}, out.QueueAttrs)
	require.Equal(t, "AWS.SimpleQueueService.NonExistentQueue", out.Missing)
	require.Empty(t, out.ListedAfterDelete)
}
