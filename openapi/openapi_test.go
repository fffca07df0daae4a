package openapi_test

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/openapi"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

func TestLoad(t *testing.T) {
	t.Parallel()

	doc, err := openapi.Load()
	require.NoError(t, err)
	require.Equal(t, "3.0.3", doc.OpenAPI)
	require.NoError(t, doc.Validate(context.Background()))
	require.NotEmpty(t, doc.Info.Description)

	// Each Load is a fresh document: changing one does not leak.
	doc.Servers = nil
	again, err := openapi.Load()
	require.NoError(t, err)
	require.NotEmpty(t, again.Servers)
}

func TestSpec(t *testing.T) {
	t.Parallel()

	onDisk, err := os.ReadFile("openapi.yaml")
	require.NoError(t, err)
	require.Equal(t, onDisk, openapi.Spec())

	// Spec hands out copies.
	s := openapi.Spec()
	s[0] = 'X'
	require.True(t, bytes.Equal(onDisk, openapi.Spec()))
}

// TestOperations holds the spec to the rules every operation follows, so an
// operation added later cannot forget its errors or its security.
func TestOperations(t *testing.T) {
	t.Parallel()

	doc, err := openapi.Load()
	require.NoError(t, err)

	require.Len(t, doc.Security, 1)
	require.Contains(t, doc.Security[0], "bearerAuth")

	ids := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			name := method + " " + path
			require.NotEmpty(t, op.OperationID, name)
			require.False(t, ids[op.OperationID], "%s: duplicate operationId %s", name, op.OperationID)
			ids[op.OperationID] = true
			require.NotEmpty(t, op.Summary, name)
			require.NotEmpty(t, op.Description, name)
			require.NotNil(t, op.Responses.Default(), "%s: no default response", name)

			if strings.HasPrefix(path, "/v1/") {
				require.Nil(t, op.Security, "%s: /v1 routes use the global bearerAuth", name)
				for _, status := range []int{401, 403} {
					require.NotNil(t, op.Responses.Status(status), "%s: no %d", name, status)
				}
				if op.RequestBody != nil {
					for _, status := range []int{400, 413} {
						require.NotNil(t, op.Responses.Status(status), "%s: has a body, no %d", name, status)
					}
				}
				if strings.Contains(path, "{queue}") || strings.Contains(path, "{topic}") {
					require.NotNil(t, op.Responses.Status(400), "%s: invalid names are 400", name)
					if method != "PUT" {
						require.NotNil(t, op.Responses.Status(404), "%s: no 404", name)
					}
				}
			} else if path == "/metrics" {
				// Open, or behind FERRY_METRICS_KEY: never an API key.
				require.NotNil(t, op.Security, name)
				require.Equal(t, openapi3.SecurityRequirements{{}, {"metricsKey": {}}}, *op.Security, name)
				require.NotNil(t, op.Responses.Status(401), "%s: no 401", name)
			} else {
				require.NotNil(t, op.Security, "%s: operational routes need no key", name)
				require.Empty(t, *op.Security, "%s: operational routes need no key", name)
			}

			// Every error response is a Problem.
			for code, resp := range op.Responses.Map() {
				if code != "default" && code[0] != '4' && code[0] != '5' {
					continue
				}
				require.Len(t, resp.Value.Content, 1, "%s %s", name, code)
				mt := resp.Value.Content.Get("application/problem+json")
				require.NotNil(t, mt, "%s %s: not application/problem+json", name, code)
				require.Equal(t, "#/components/schemas/Problem", mt.Schema.Ref, "%s %s", name, code)
			}
		}
	}

	// The first slice: work queues and operations; then topics.
	want := []string{
		"listTopics", "putTopic", "getTopic", "deleteTopic",
		"publishEvents", "readEvents",
		"listQueues", "putQueue", "getQueue", "deleteQueue",
		"sendMessages", "purgeMessages", "receiveMessages",
		"ackMessages", "nackMessages", "extendMessages",
		"listDeadLetters", "purgeDeadLetters", "redriveDeadLetters",
		"healthz", "readyz", "metrics", "openapi",
	}
	for _, id := range want {
		require.True(t, ids[id], "missing operation %s", id)
	}

	// Queue and topic names are restricted as API.md says.
	name := doc.Components.Schemas["Name"].Value
	require.Equal(t, `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`, name.Pattern)
	for _, param := range []string{"Queue", "Topic"} {
		p := doc.Components.Parameters[param].Value
		require.Equal(t, "path", p.In, param)
		require.Equal(t, "#/components/schemas/Name", p.Schema.Ref, param)
	}

	// Shrinking a topic's partitions is a conflict.
	putTopic := doc.Paths.Find("/v1/topics/{topic}").Put
	require.NotNil(t, putTopic.Responses.Status(409))

	// Reading a topic takes the query parameters of API.md, with their ranges.
	readEvents := doc.Paths.Find("/v1/topics/{topic}/events").Get
	params := map[string]*openapi3.Schema{}
	for _, p := range readEvents.Parameters {
		require.Equal(t, "query", p.Value.In, p.Value.Name)
		params[p.Value.Name] = p.Value.Schema.Value
	}
	require.Len(t, params, 5)
	for _, tt := range []struct {
		param string
		value any
		ok    bool
	}{
		{"partition", 0, true}, {"partition", 255, true}, {"partition", -1, false}, {"partition", 256, false},
		{"from_offset", 0, true}, {"from_offset", int64(1) << 40, true}, {"from_offset", -1, false},
		{"from_time", "2025-06-01T10:00:00Z", true}, {"from_time", "yesterday", false},
		{"limit", 1, true}, {"limit", 1000, true}, {"limit", 0, false}, {"limit", 1001, false},
		{"wait_seconds", 0, true}, {"wait_seconds", 20, true}, {"wait_seconds", 21, false}, {"wait_seconds", -1, false},
	} {
		s := params[tt.param]
		require.NotNil(t, s, tt.param)
		err := s.VisitJSON(tt.value)
		if tt.ok {
			require.NoError(t, err, "%s=%v", tt.param, tt.value)
		} else {
			require.Error(t, err, "%s=%v", tt.param, tt.value)
		}
	}

	// Every list pages (API.md § Conventions): limit and after in, a
	// required next out.
	for path, member := range map[string]string{
		"/v1/queues": "queues", "/v1/topics": "topics",
		"/v1/topics/{topic}/subscriptions": "subscriptions", "/v1/topics/{topic}/groups": "groups",
		"/v1/keys": "keys",
	} {
		op := doc.Paths.Find(path).Get
		require.NotNil(t, op, path)
		names := map[string]*openapi3.Schema{}
		for _, p := range op.Parameters {
			if p.Value.In == "query" {
				names[p.Value.Name] = p.Value.Schema.Value
			}
		}
		require.Len(t, names, 2, path)
		require.NoError(t, names["limit"].VisitJSON(1000), path)
		require.Error(t, names["limit"].VisitJSON(1001), path)
		require.Error(t, names["limit"].VisitJSON(0), path)
		require.EqualValues(t, 100, names["limit"].Default, path)
		require.NotNil(t, names["after"], path)
		require.NotNil(t, op.Responses.Status(400), path)
		list := op.Responses.Status(200).Value.Content.Get("application/json")
		require.ElementsMatch(t, []string{member, "next"}, list.Schema.Value.Required, path)
		require.NotNil(t, list.Example, "%s: an example page", path)
	}

	// Every response object is closed: the server may not send fields the
	// contract does not name.
	for schemaName, ref := range doc.Components.Schemas {
		s := ref.Value
		if s.Type.Is("object") && s.AdditionalProperties.Schema == nil {
			require.NotNil(t, s.AdditionalProperties.Has, "%s: set additionalProperties", schemaName)
			if schemaName != "Attributes" {
				require.False(t, *s.AdditionalProperties.Has, "%s: additionalProperties should be false", schemaName)
			}
		}
	}
}

// TestRequestSchemas checks that the request schemas encode the rules of
// API.md: strict fields, ranges that are refused rather than clamped,
// non-empty batches and mutually exclusive fields.
func TestRequestSchemas(t *testing.T) {
	t.Parallel()

	doc, err := openapi.Load()
	require.NoError(t, err)

	tests := []struct {
		schema string
		body   string
		ok     bool
	}{
		{"QueueConfig", `{}`, true},
		{"QueueConfig", `{"visibility_timeout_seconds": 60, "max_receives": 10, "retention_seconds": 60, "delay_seconds": 86400, "dedup_window_seconds": 0, "max_depth": 1000000000000, "retry_min_seconds": 0, "retry_max_seconds": 43200}`, true},
		{"QueueConfig", `{"push": {"url": "https://example.com"}}`, true},
		{"QueueConfig", `{"push": {"url": "https://example.com/hooks", "timeout_seconds": 60, "max_in_flight": 1000, "rate_limit_per_second": 10000}}`, true},
		{"QueueConfig", `{"push": {"timeout_seconds": 1, "max_in_flight": 1, "rate_limit_per_second": 0}}`, true},
		{"QueueConfig", `{"push": null}`, true},
		{"QueueConfig", `{"push": {"url": "ftp://example.com/"}}`, false},
		{"QueueConfig", `{"push": {"url": "https://example.com/` + strings.Repeat("p", 2048) + `"}}`, false},
		{"QueueConfig", `{"push": {"url": "https://example.com", "timeout_seconds": 0}}`, false},
		{"QueueConfig", `{"push": {"url": "https://example.com", "timeout_seconds": 61}}`, false},
		{"QueueConfig", `{"push": {"url": "https://example.com", "max_in_flight": 0}}`, false},
		{"QueueConfig", `{"push": {"url": "https://example.com", "max_in_flight": 1001}}`, false},
		{"QueueConfig", `{"push": {"url": "https://example.com", "rate_limit_per_second": -1}}`, false},
		{"QueueConfig", `{"push": {"url": "https://example.com", "rate_limit_per_second": 10001}}`, false},
		{"QueueConfig", `{"push": {"url": "https://example.com", "secret": "whsec_x"}}`, false},
		{"QueueConfig", `{"push": "https://example.com"}`, false},
		{"SubscriptionRequest", `{"push": {"url": "https://example.com", "timeout_seconds": 5}}`, true},
		{"SubscriptionRequest", `{"push": null}`, true},
		{"SubscriptionRequest", `{"filter": null}`, true},
		{"SubscriptionRequest", `{"filter": {"types": ["order.*"]}}`, true},
		{"SubscriptionRequest", `{"filter": {"kinds": ["x"]}}`, false},
		{"SubscriptionRequest", `{"filter": "order.*"}`, false},
		{"SubscriptionRequest", `{"push": {"url": "https://example.com", "failing_since": null}}`, false},
		{"QueueConfig", `{"visibility_timeout_seconds": -1}`, false},
		{"QueueConfig", `{"visibility_timeout_seconds": 43201}`, false},
		{"QueueConfig", `{"visibility_timeout_seconds": 1.5}`, false},
		{"QueueConfig", `{"visibility_timeout_seconds": "30"}`, false},
		{"QueueConfig", `{"max_receives": 0}`, true}, // never dead-lettered (an SQS queue without a RedrivePolicy)
		{"QueueConfig", `{"max_receives": -1}`, false},
		{"SubscriptionRequest", `{"max_receives": 0}`, false},
		{"QueueConfig", `{"receive_wait_seconds": 21}`, false},
		{"QueueConfig", `{"max_message_size": 262145}`, false},
		{"QueueConfig", `{"tags": {"k": 1}}`, false},
		{"QueueConfig", `{"retention_seconds": 59}`, false},
		{"QueueConfig", `{"retention_seconds": 1209601}`, false},
		{"QueueConfig", `{"max_depth": 1000000000001}`, false},

		{"SendRequest", `{"messages": [{"body": {"order_id": "ORD-9912"}, "attributes": {"type": "order.created"}, "group": "acct-456", "dedup_id": "evt_7b2f9c", "delay_seconds": 0}]}`, true},
		{"SendRequest", `{"messages": [{"body": null}, {"body": 1}, {"body": "s"}, {"body": [1, {}]}, {"body": true}]}`, true},
		{"SendRequest", `{"messages": [{"body": {}, "deliver_at": "2030-01-02T03:04:05Z"}]}`, true},
		{"SendRequest", `{"messages": []}`, false},
		{"SendRequest", `{}`, false},
		{"SendRequest", `{"messages": [{}]}`, false},
		{"SendRequest", `{"messages": [{"body": 1, "extra": 1}]}`, false},
		{"SendRequest", `{"messages": [{"body": 1, "delay_seconds": -1}]}`, false},
		{"SendRequest", `{"messages": [{"body": 1, "delay_seconds": 5, "deliver_at": "2030-01-02T03:04:05Z"}]}`, false},
		{"SendRequest", `{"messages": [{"body": 1, "deliver_at": "tomorrow"}]}`, false},
		{"SendRequest", `{"messages": [{"body": 1, "attributes": {"n": 1}}]}`, false},
		{"SendRequest", `{"messages": [{"body": 1, "group": ""}]}`, false},
		{"SendRequest", `{"messages": [{"body": 1, "dedup_id": "` + strings.Repeat("x", 129) + `"}]}`, false},

		{"ReceiveRequest", `{}`, true},
		{"ReceiveRequest", `{"max_messages": 100, "visibility_timeout_seconds": 1, "wait_seconds": 20}`, true},
		{"ReceiveRequest", `{"visibility_timeout_seconds": 0}`, true},
		{"ReceiveRequest", `{"visibility_timeout_seconds": -1}`, false},
		{"ExtendRequest", `{"receipts": ["r1"], "visibility_timeout_seconds": 0}`, false},
		{"QueueConfig", `{"visibility_timeout_seconds": 0}`, true},
		{"QueueConfig", `{"visibility_timeout_seconds": -1}`, false},
		{"ReceiveRequest", `{"max_messages": 101}`, false},
		{"ReceiveRequest", `{"max_messages": 0}`, false},
		{"ReceiveRequest", `{"wait_seconds": 21}`, false},

		{"AckRequest", `{"receipts": ["r1"]}`, true},
		{"AckRequest", `{"receipts": []}`, false},
		{"AckRequest", `{"receipts": [""]}`, false},
		{"NackRequest", `{"receipts": ["r1"], "delay_seconds": 5, "error": "text", "dead_letter": false}`, true},
		{"NackRequest", `{"receipts": ["r1"], "error": "` + strings.Repeat("e", 4097) + `"}`, false},
		{"NackRequest", `{"receipts": ["r1"], "delay_seconds": -1}`, false},
		{"ExtendRequest", `{"receipts": ["r1"], "visibility_timeout_seconds": 60}`, true},
		{"ExtendRequest", `{"receipts": ["r1"]}`, false},

		{"RedriveRequest", `{"ids": ["1", "2"]}`, true},
		{"RedriveRequest", `{"limit": 100}`, true},
		{"RedriveRequest", `{"limit": 10001}`, false},
		{"RedriveRequest", `{"ids": ["1"], "limit": 1}`, false},
		{"RedriveRequest", `{}`, false},
		{"RedriveRequest", `{"ids": []}`, false},

		{"TopicConfig", `{}`, true},
		{"TopicConfig", `{"partitions": 4, "retention_seconds": 604800, "dedup_window_seconds": 300}`, true},
		{"TopicConfig", `{"partitions": 1, "retention_seconds": 60, "dedup_window_seconds": 0}`, true},
		{"TopicConfig", `{"partitions": 256, "retention_seconds": 31536000, "dedup_window_seconds": 86400}`, true},
		{"TopicConfig", `{"partitions": 0}`, false},
		{"TopicConfig", `{"partitions": 257}`, false},
		{"TopicConfig", `{"partitions": 2.5}`, false},
		{"TopicConfig", `{"retention_seconds": 59}`, false},
		{"TopicConfig", `{"retention_seconds": 31536001}`, false},
		{"TopicConfig", `{"dedup_window_seconds": -1}`, false},
		{"TopicConfig", `{"dedup_window_seconds": 86401}`, false},
		{"TopicConfig", `{"name": "t1"}`, false},

		{"PublishRequest", `{"events": [{"id": "evt-771", "type": "order.created", "key": "ORD-9912", "data": {"customer_id": "cust-456"}, "attributes": {"region": "eu"}}]}`, true},
		{"PublishRequest", `{"events": [{"type": "t"}, {"type": "t", "data": null}, {"type": "t", "data": [1, "x"]}, {"type": "t", "data": 3.5}, {"type": "t", "data": false}]}`, true},
		{"PublishRequest", `{"events": [{"type": "` + strings.Repeat("t", 256) + `", "id": "` + strings.Repeat("i", 256) + `", "key": "` + strings.Repeat("k", 256) + `"}]}`, true},
		{"PublishRequest", `{"events": []}`, false},
		{"PublishRequest", `{}`, false},
		{"PublishRequest", `{"events": [{}]}`, false},
		{"PublishRequest", `{"events": [{"data": {"a": 1}}]}`, false},
		{"PublishRequest", `{"events": [{"type": ""}]}`, false},
		{"PublishRequest", `{"events": [{"type": "` + strings.Repeat("t", 257) + `"}]}`, false},
		{"PublishRequest", `{"events": [{"type": "t", "id": ""}]}`, false},
		{"PublishRequest", `{"events": [{"type": "t", "key": ""}]}`, false},
		{"PublishRequest", `{"events": [{"type": "t", "key": "` + strings.Repeat("k", 257) + `"}]}`, false},
		{"PublishRequest", `{"events": [{"type": "t", "key": null}]}`, false},
		{"PublishRequest", `{"events": [{"type": "t", "attributes": {"n": 1}}]}`, false},
		{"PublishRequest", `{"events": [{"type": "t", "partition": 1}]}`, false},
		{"PublishRequest", `{"events": [{"type": "t"}], "topic": "t1"}`, false},
		{"PublishRequest", `{"events": [` + strings.Repeat(`{"type": "t"}, `, 1000) + `{"type": "t"}]}`, false},
	}
	for _, tt := range tests {
		openapitest.CheckSchema(t, doc, tt.schema, tt.body, true, tt.ok)
	}
}

// TestResponseSchemas checks the response shapes against the examples of
// API.md.
func TestResponseSchemas(t *testing.T) {
	t.Parallel()

	doc, err := openapi.Load()
	require.NoError(t, err)

	event := `{"id": "evt-771", "type": "order.created", "key": "ORD-9912", "data": {"customer_id": "cust-456"}, "attributes": {"region": "eu"}, "partition": 2, "offset": 41, "published_at": "2025-06-01T10:00:00.123456Z", "source": "/ferry/topics/orders", "time": "2025-06-01T10:00:00.123456Z", "datacontenttype": "application/json", "extensions": {}}`
	topic := `{"name": "orders", "partitions": 2, "retention_seconds": 604800, "dedup_window_seconds": 300, "source": "/ferry/topics/orders", "created_at": "2025-06-01T10:00:00Z", "updated_at": "2025-06-01T10:00:00Z", "offsets": [{"partition": 0, "head_offset": 41, "oldest_offset": 7}, {"partition": 1, "head_offset": -1, "oldest_offset": 0}]}`
	deadLetter := `{"id": "7", "body": {"a": 1}, "attributes": {}, "group": null, "dedup_id": null, "receive_count": 5, "last_error": null, "sent_at": "2025-01-01T00:00:00Z", "dead_lettered_at": "2025-01-01T00:01:00.123456+02:00"}`
	tests := []struct {
		schema string
		body   string
		ok     bool
	}{
		{"SendResponse", `{"messages": [{"id": "1", "duplicate": false}, {"id": "1", "duplicate": true}]}`, true},
		{"SendResponse", `{"messages": [{"id": 1, "duplicate": false}]}`, false},
		{"ReceiveResponse", `{"messages": []}`, true},
		{"ReceiveResponse", `{"messages": [{"id": "1", "body": null, "attributes": {}, "group": "g", "dedup_id": null, "receipt": "r", "receive_count": 1, "sent_at": "2025-01-01T00:00:00Z"}]}`, true},
		{"ReceiveResponse", `{"messages": [{"id": "1", "body": null, "attributes": {}, "group": "g", "dedup_id": null, "receipt": "r", "receive_count": 0, "sent_at": "2025-01-01T00:00:00Z"}]}`, false},
		{"ReceiveResponse", `{"messages": [{"id": "1", "body": null, "group": "g", "dedup_id": null, "receipt": "r", "receive_count": 1, "sent_at": "2025-01-01T00:00:00Z"}]}`, false},
		{"ReceiptResults", `{"results": [{"receipt": "r", "status": "ok"}, {"receipt": "s", "status": "stale"}]}`, true},
		{"ReceiptResults", `{"results": [{"receipt": "r", "status": "gone"}]}`, false},
		{"DeadLetterPage", `{"messages": [` + deadLetter + `], "next": "c1"}`, true},
		{"DeadLetterPage", `{"messages": [], "next": null}`, true},
		{"DeadLetterPage", `{"messages": []}`, false},
		{"RedriveResponse", `{"redriven": 3}`, true},
		{"Problem", `{"type": "about:blank", "title": "Not Found", "status": 404, "detail": "queue q1 not found", "code": "not_found"}`, true},
		{"Problem", `{"type": "about:blank", "title": "Bad", "status": 400, "detail": "d", "code": "invalid_request", "errors": [{"field": "messages", "message": "empty"}], "request_id": "abc"}`, true},
		{"Problem", `{"type": "about:blank", "title": "Bad", "status": 400, "code": "invalid_request"}`, false},

		{"PublishResponse", `{"events": [{"id": "evt-771", "partition": 2, "offset": 0, "duplicate": false}, {"id": "evt-771", "partition": 2, "offset": 0, "duplicate": true}]}`, true},
		{"PublishResponse", `{"events": [{"id": "evt-771", "partition": 2, "offset": -1, "duplicate": false}]}`, false},
		{"PublishResponse", `{"events": [{"id": "evt-771", "partition": 2, "offset": 0}]}`, false},
		{"EventPage", `{"events": [], "next_offset": 0}`, true},
		{"EventPage", `{"events": [` + event + `, ` + strings.Replace(strings.Replace(event, `"offset": 41`, `"offset": 42`, 1), `"key": "ORD-9912"`, `"key": null`, 1) + `], "next_offset": 43}`, true},
		{"EventPage", `{"events": [` + strings.Replace(event, `"data": {"customer_id": "cust-456"}`, `"data": null`, 1) + `], "next_offset": 42}`, true},
		{"EventPage", `{"events": []}`, false},
		{"EventPage", `{"events": [` + strings.Replace(event, `"attributes": {"region": "eu"}, `, "", 1) + `], "next_offset": 42}`, false},
		{"EventPage", `{"events": [` + strings.Replace(event, `"published_at": "2025-06-01T10:00:00.123456Z"`, `"published_at": "now"`, 1) + `], "next_offset": 42}`, false},
		{"EventPage", `{"events": [` + strings.Replace(event, `"id": "evt-771", `, `"id": "evt-771", "duplicate": false, `, 1) + `], "next_offset": 42}`, false},
		{"TopicList", `{"topics": [], "next": null}`, true},
		{"TopicList", `{"topics": [` + topic + `], "next": "dG9waWNzOm9yZGVycw"}`, true},
		{"TopicList", `{"topics": []}`, false},
		{"TopicList", `{"topics": [], "next": 1}`, false},
		{"QueueList", `{"queues": [], "next": null}`, true},
		{"QueueList", `{"queues": []}`, false},
		{"SubscriptionList", `{"subscriptions": [], "next": "c3Vic2NyaXB0aW9uczpiaWxsaW5n"}`, true},
		{"SubscriptionList", `{"subscriptions": []}`, false},
		{"GroupList", `{"groups": [], "next": null}`, true},
		{"GroupList", `{"groups": []}`, false},
		{"Topic", topic, true},
		{"Topic", strings.Replace(topic, `"head_offset": -1, "oldest_offset": 0`, `"head_offset": -2, "oldest_offset": 0`, 1), false},
		{"Topic", strings.Replace(topic, `, "offsets": [`, `, "stats": {}, "offsets": [`, 1), false},
		{"Topic", strings.Replace(topic, `"partitions": 2, `, "", 1), false},
		{"Topic", strings.Replace(topic, `"offsets": [{"partition": 0, "head_offset": 41, "oldest_offset": 7}, {"partition": 1, "head_offset": -1, "oldest_offset": 0}]`, `"offsets": []`, 1), false},
		{"PushAttemptList", `{"attempts": []}`, true},
		{"PushAttemptList", `{"attempts": [{"message_id": "7", "attempt": 2, "status_code": 204, "error": null, "duration_ms": 38, "at": "2025-06-01T10:00:05Z"}, {"message_id": "7", "attempt": 1, "status_code": null, "error": "timeout", "duration_ms": 10000, "at": "2025-06-01T10:00:01Z"}]}`, true},
		{"PushAttemptList", `{"attempts": [{"message_id": "7", "attempt": 0, "status_code": 204, "error": null, "duration_ms": 38, "at": "2025-06-01T10:00:05Z"}]}`, false},
		{"PushAttemptList", `{"attempts": [{"message_id": "7", "attempt": 1, "error": null, "duration_ms": 38, "at": "2025-06-01T10:00:05Z"}]}`, false},
		{"PushAttemptList", `{}`, false},
		{"SecretRotation", `{"signing_secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "previous_secret_expires": "2025-06-02T10:00:00Z"}`, true},
		{"SecretRotation", `{"signing_secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "previous_secret_expires": "2025-06-02T10:00:00Z"}`, false},
		{"SecretRotation", `{"signing_secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`, false},
		{"Push", `{"url": "https://example.com/h", "timeout_seconds": 10, "max_in_flight": 10, "rate_limit_per_second": 0, "format": "standard", "failing_since": null, "disabled_at": "2025-06-01T10:00:00Z", "disabled_reason": "410"}`, true},
		{"Push", `{"url": "https://example.com/h", "timeout_seconds": 10, "max_in_flight": 10, "rate_limit_per_second": 0}`, false},
		// The nullable members (a $ref beside nullable and a type, or an
		// anyOf whose one branch admits null) take null and their schema's
		// values, and nothing else.
		{"GroupPartition", `{"partition": 0, "committed_offset": -1, "head_offset": -1, "lag": 0, "owner": null, "expired_skipped": 0}`, true},
		{"GroupPartition", `{"partition": 0, "committed_offset": -1, "head_offset": -1, "lag": 0, "owner": "worker-1", "expired_skipped": 0}`, true},
		{"GroupPartition", `{"partition": 0, "committed_offset": -1, "head_offset": -1, "lag": 0, "owner": "-bad", "expired_skipped": 0}`, false},
		{"GroupPartition", `{"partition": 0, "committed_offset": -1, "head_offset": -1, "lag": 0, "owner": 7, "expired_skipped": 0}`, false},
		{"SubscriptionFilter", `{"data": {"a.b": ["x", 1, 2.5, true, null]}}`, true},
		{"SubscriptionFilter", `{"data": {"a.b": [{}]}}`, false},
		{"SubscriptionFilter", `{"data": {"a.b": [[1]]}}`, false},
		{"MessageBody", `null`, true},
		{"MessageBody", `{"a": [1, "x", null]}`, true},
		{"MessageBody", `[]`, true},
		{"MessageBody", `[1, "two", null, [null], {"a": null}]`, true},
		{"MessageBody", `"s"`, true},
		{"MessageBody", `-1.5`, true},
		{"MessageBody", `false`, true},
		{"EventData", `null`, true},
		{"EventData", `{"customer_id": "cust-456"}`, true},
		{"EventData", `7`, true},
		{"EventData", `[1, "two", null]`, true},
		{"Health", `{"status": "ok"}`, true},
		{"Ready", `{"status": "ready"}`, true},
	}
	for _, tt := range tests {
		openapitest.CheckSchema(t, doc, tt.schema, tt.body, false, tt.ok)
	}

	// A queue or topic response carries every config field, required, with
	// the same schema as the request.
	for resource, configName := range map[string]string{"Queue": "QueueConfig", "Topic": "TopicConfig"} {
		resp := doc.Components.Schemas[resource].Value
		config := doc.Components.Schemas[configName].Value
		for field := range config.Properties {
			require.True(t, slices.Contains(resp.Required, field), "%s must require %s", resource, field)
			if field == "push" {
				// The request's push is the fields to change (PushConfig),
				// the response's the whole setting and its state (Push).
				require.Equal(t, "#/components/schemas/PushConfig", config.Properties[field].Value.AnyOf[0].Ref)
				require.Equal(t, "#/components/schemas/Push", resp.Properties[field].Value.AnyOf[0].Ref)
				continue
			}
			require.NotEmpty(t, config.Properties[field].Ref, "%s.%s", configName, field)
			require.Equal(t, config.Properties[field].Ref, resp.Properties[field].Ref, "%s.%s", resource, field)
		}
	}
}
