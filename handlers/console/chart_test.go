package console_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	sqsface "github.com/ferry-mq/ferry/handlers/sqs"
	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/store"
)

// TestConsoleCharts proves the charts: traffic through REST is sampled
// into the history, and the queue, topic and group pages draw it as SVG.
func TestConsoleCharts(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.SampleEvery = 50 * time.Millisecond })
	rest(t, env, "PUT", "/v1/queues/busy", nil, http.StatusCreated)
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	require.Contains(t, u.get("/ui/queues/busy").Body, "no traffic in the last hour")

	deadLetterAll(t, env, "busy", "bad", 1, 2)
	rest(t, env, "PUT", "/v1/topics/tp", nil, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/tp/events", map[string]any{"events": []any{map[string]any{"type": "x"}}}, http.StatusCreated)
	rest(t, env, "POST", "/v1/topics/tp/groups/g/poll", map[string]any{"consumer": "c1", "start": "earliest", "max_events": 1}, http.StatusOK)
	for _, page := range []string{"/ui/queues/busy", "/ui/topics/tp", "/ui/topics/tp/groups/g"} {
		ferrytest.WaitFor(t, 10*time.Second, "the chart of "+page, func() bool {
			p := u.get(page)
			return strings.Contains(p.Body, `id="charts"`) && !strings.Contains(p.Body, "no traffic") && strings.Contains(p.Body, `<polyline points="`)
		})
	}
	p := u.get("/ui/queues/busy")
	require.Contains(t, p.Body, "dead letters")
	require.Contains(t, p.Body, "<svg")
	require.Contains(t, u.get("/ui/topics/tp").Body, "published / min")
}

// TestConsoleChartsCountEveryFace proves that the rates count what the
// engine counts, whichever face the traffic came through: sends and acks
// through the SQS face and through the SQL API (in the application's own
// transactions) all show in the queue's history and chart, though none
// went through the REST handlers.
func TestConsoleChartsCountEveryFace(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.SampleEvery = 50 * time.Millisecond })
	ctx := context.Background()
	rest(t, env, "PUT", "/v1/queues/faces", nil, http.StatusCreated)

	sqs := awssqs.New(awssqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(env.URL), Retryer: aws.NopRetryer{},
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "admin", SecretAccessKey: ferrytest.AdminKey}, nil
		}),
	})
	url := aws.String(env.URL + "/" + sqsface.AccountID + "/faces")
	_, err := sqs.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: url, Entries: []sqstypes.SendMessageBatchRequestEntry{
		{Id: aws.String("a"), MessageBody: aws.String("1")}, {Id: aws.String("b"), MessageBody: aws.String("2")}, {Id: aws.String("c"), MessageBody: aws.String("3")},
	}})
	require.NoError(t, err)
	got, err := sqs.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 1})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	_, err = sqs.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: got.Messages[0].ReceiptHandle})
	require.NoError(t, err)

	pool := env.Server.Pool()
	_, err = pool.Exec(ctx, `SELECT ferry.send('faces', '{"n": 4}'), ferry.send('faces', '{"n": 5}')`)
	require.NoError(t, err)
	var acked int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry.ack('faces', ARRAY(SELECT receipt FROM ferry.receive('faces', 2, 60)))
		WHERE status = 'ok'`).Scan(&acked))
	require.Equal(t, 2, acked)

	ferrytest.WaitFor(t, 10*time.Second, "5 sent, 3 acked in the history", func() bool {
		s, err := store.QueueSampleList(ctx, pool, "", "faces", time.Hour)
		require.NoError(t, err)
		return len(s) > 0 && s[len(s)-1].Added == 5 && s[len(s)-1].Depth == 2
	})
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	svgs := charts(t, u.get("/ui/queues/faces").Body)
	require.Len(t, svgs, 2)
	require.NotContains(t, svgs[1], "no traffic")
	require.NotEqual(t, "1", axisMax(t, svgs[1]), "a minute's rate above nothing")
}

// TestConsoleChartAfterAnHour proves what a chart looks like after an
// hour of traffic: an hour of minutes, each with sends and an ack through
// REST and a sample of the history taken at that minute, draws lines of
// 61 points (one a minute, the last now's), without dots, with the time
// axis labelled −60 min, −30 min and now, and the largest value on the
// value axis: a depth of 61, and 3 sent in the busiest minute.
func TestConsoleChartAfterAnHour(t *testing.T) {
	t.Parallel()
	env := ferrytest.Start(t, func(c *server.Config) { c.SampleEvery = time.Hour }) // sampled by the test alone
	ctx := context.Background()
	rest(t, env, "PUT", "/v1/queues/hourly", nil, http.StatusCreated)
	base := time.Now().Truncate(time.Minute).Add(-time.Hour)
	for i := range 61 {
		msgs := make([]any, i%3+1)
		for j := range msgs {
			msgs[j] = map[string]any{"body": j}
		}
		rest(t, env, "POST", "/v1/queues/hourly/messages", map[string]any{"messages": msgs}, http.StatusCreated)
		if i > 0 {
			got := rest(t, env, "POST", "/v1/queues/hourly/receive", map[string]any{"max_messages": 1}, http.StatusOK)["messages"].([]any)
			require.Len(t, got, 1)
			rest(t, env, "POST", "/v1/queues/hourly/ack", map[string]any{"receipts": []any{got[0].(map[string]any)["receipt"]}}, http.StatusOK)
		}
		require.NoError(t, store.SamplesWrite(ctx, env.Server.Pool(), base.Add(time.Duration(i)*time.Minute)))
	}
	u := newUI(t, env)
	u.signIn(ferrytest.AdminKey)
	svgs := charts(t, u.get("/ui/queues/hourly").Body)
	require.Len(t, svgs, 2)
	for i, svg := range svgs {
		for _, label := range []string{">−60 min<", ">−30 min<", ">now<"} {
			require.Contains(t, svg, label, "chart %d", i)
		}
		require.NotContains(t, svg, "no traffic")
		require.NotContains(t, svg, "<circle", "no dots on a line of 61 points")
		lines := polylines(svg)
		require.Len(t, lines, 2, "two series a chart")
		for _, pts := range lines {
			require.Len(t, pts, 61, "chart %d: a point a minute", i)
		}
	}
	require.Equal(t, "61", axisMax(t, svgs[0]), "the depth at the end: 121 sent, 60 acked")
	require.Equal(t, "3", axisMax(t, svgs[1]), "the busiest minute sent 3")
}

var (
	svgRE      = regexp.MustCompile(`(?s)<svg .*?</svg>`)
	polylineRE = regexp.MustCompile(`<polyline points="([^"]*)"`)
	axisMaxRE  = regexp.MustCompile(`<text x="2" y="12" [^>]*>(\d+)</text>`)
)

// charts are the SVG charts of a page.
func charts(t *testing.T, body string) []string {
	t.Helper()
	return svgRE.FindAllString(body, -1)
}

// polylines are the points of each line of a chart.
func polylines(svg string) [][]string {
	var out [][]string
	for _, m := range polylineRE.FindAllStringSubmatch(svg, -1) {
		out = append(out, strings.Fields(m[1]))
	}
	return out
}

// axisMax is the label at the top of a chart's value axis.
func axisMax(t *testing.T, svg string) string {
	t.Helper()
	m := axisMaxRE.FindStringSubmatch(svg)
	require.NotNil(t, m, svg)
	return m[1]
}
