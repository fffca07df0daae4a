package sqs_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestAuthFailuresCounted: the SQS face's refusals for the request's key
// are counted in ferry_auth_failures_total with the REST face's reasons —
// no or an ill-formed signature as missing, an unknown access key id or
// a wrong signature as invalid, AccessDenied as forbidden — and requests
// that are answered, or refused for anything but their key, are not.
func TestAuthFailuresCounted(t *testing.T) {
	t.Parallel()
	env := start(t)
	ctx := context.Background()
	url := createQueue(t, admin(env), "counted", nil)

	step := func(what string, want map[string]float64, do func()) {
		t.Helper()
		before := authFailures(t, env)
		do()
		after := authFailures(t, env)
		for _, reason := range []string{"missing", "invalid", "forbidden"} {
			require.Equal(t, want[reason], after[reason]-before[reason], "%s: ferry_auth_failures_total{reason=%q}", what, reason)
		}
	}
	unsigned := func(authorization string) func() {
		return func() {
			req, err := http.NewRequest(http.MethodPost, env.URL+"/", strings.NewReader("Action=ListQueues"))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if authorization != "" {
				req.Header.Set("Authorization", authorization)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.NotEqual(t, http.StatusOK, resp.StatusCode)
		}
	}
	step("no signature", map[string]float64{"missing": 1}, unsigned(""))
	step("a signature not shaped like SigV4", map[string]float64{"missing": 1}, unsigned("AWS4-HMAC-SHA256 Credential=admin"))
	step("an unknown access key id", map[string]float64{"invalid": 1}, func() {
		_, err := client(env, "key_nobody", "secret").ListQueues(ctx, &awssqs.ListQueuesInput{})
		requireCode(t, err, "InvalidClientTokenId")
	})
	step("a wrong secret", map[string]float64{"invalid": 1}, func() {
		_, err := client(env, "admin", ferrytest.AdminKey+"x").ListQueues(ctx, &awssqs.ListQueuesInput{})
		requireCode(t, err, "SignatureDoesNotMatch")
	})
	step("a key without the permission", map[string]float64{"forbidden": 1}, func() {
		_, err := client(env, scopedID, scopedSecret).SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("x")})
		requireCode(t, err, "AccessDenied")
	})
	step("answered, or refused for another reason", nil, func() {
		_, err := admin(env).SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("x")})
		require.NoError(t, err)
		_, err = admin(env).GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("absent")})
		requireCode(t, err, "AWS.SimpleQueueService.NonExistentQueue")
		_, err = client(env, scopedID, scopedSecret).GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("orders-absent")})
		requireCode(t, err, "AWS.SimpleQueueService.NonExistentQueue")
	})
}

// authFailures is env's ferry_auth_failures_total by reason.
func authFailures(t *testing.T, env *ferrytest.Env) map[string]float64 {
	t.Helper()
	r := env.Do(http.MethodGet, "/metrics", nil)
	require.Equal(t, http.StatusOK, r.Status)
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), `ferry_auth_failures_total{reason="`)
		if !ok {
			continue
		}
		reason, value, ok := strings.Cut(rest, `"} `)
		require.True(t, ok, sc.Text())
		v, err := strconv.ParseFloat(value, 64)
		require.NoError(t, err, sc.Text())
		out[reason] = v
	}
	require.Len(t, out, 3, "every reason is exported")
	return out
}
