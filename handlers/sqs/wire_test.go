package sqs_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/sqsmd5"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
)

// TestQueryProtocol drives the Query protocol (form-encoded, XML answers)
// with requests signed by aws-sdk-go-v2's signer, posted to / and to a
// QueueUrl, as older SDKs and libraries send them.
func TestQueryProtocol(t *testing.T) {
	t.Parallel()
	env := start(t)
	status, body := queryRequest{params: url.Values{"Action": {"CreateQueue"}, "QueueName": {"q1"},
		"Attribute.1.Name": {"VisibilityTimeout"}, "Attribute.1.Value": {"40"}}}.do(t, env, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var created struct {
		XMLName   xml.Name `xml:"http://queue.amazonaws.com/doc/2012-11-05/ CreateQueueResponse"`
		QueueURL  string   `xml:"CreateQueueResult>QueueUrl"`
		RequestID string   `xml:"ResponseMetadata>RequestId"`
	}
	require.NoError(t, xml.Unmarshal(body, &created), "%s", body)
	require.Equal(t, queueURL(env, "q1"), created.QueueURL)
	require.NotEmpty(t, created.RequestID)

	msg := "a <b> & \"c\"\r\n"
	status, body = queryRequest{path: "/000000000000/q1", params: url.Values{"Action": {"SendMessage"}, "MessageBody": {msg},
		"MessageAttribute.1.Name": {"bin"}, "MessageAttribute.1.Value.DataType": {"Binary"},
		"MessageAttribute.1.Value.BinaryValue": {"AAEC"},
		"MessageAttribute.2.Name":              {"num"}, "MessageAttribute.2.Value.DataType": {"Number"},
		"MessageAttribute.2.Value.StringValue": {"42"}}}.do(t, env, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var sent struct {
		MessageID string `xml:"SendMessageResult>MessageId"`
		MD5Body   string `xml:"SendMessageResult>MD5OfMessageBody"`
		MD5Attrs  string `xml:"SendMessageResult>MD5OfMessageAttributes"`
	}
	require.NoError(t, xml.Unmarshal(body, &sent))
	wantAttrs := sqsmd5.Attributes(map[string]sqsmd5.Attribute{
		"bin": {DataType: "Binary", BinaryValue: []byte{0, 1, 2}}, "num": {DataType: "Number", StringValue: "42"}})
	require.Equal(t, sqsmd5.Body(msg), sent.MD5Body)
	require.Equal(t, wantAttrs, sent.MD5Attrs)

	status, body = queryRequest{params: url.Values{"Action": {"ReceiveMessage"}, "QueueUrl": {queueURL(env, "q1")},
		"AttributeName.1": {"All"}, "MessageAttributeName.1": {"All"}}}.do(t, env, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var got struct {
		Messages []struct {
			MessageID string `xml:"MessageId"`
			Body      string
			MD5OfBody string
			MD5Attrs  string `xml:"MD5OfMessageAttributes"`
			Attribute []struct{ Name, Value string }
			MsgAttr   []struct {
				Name  string
				Value struct{ StringValue, BinaryValue, DataType string }
			} `xml:"MessageAttribute"`
		} `xml:"ReceiveMessageResult>Message"`
	}
	require.NoError(t, xml.Unmarshal(body, &got), "%s", body)
	require.Len(t, got.Messages, 1)
	m := got.Messages[0]
	require.Equal(t, sent.MessageID, m.MessageID)
	require.Equal(t, msg, m.Body, "the body is exact through XML")
	require.Equal(t, sqsmd5.Body(msg), m.MD5OfBody)
	require.Equal(t, wantAttrs, m.MD5Attrs)
	require.Len(t, m.MsgAttr, 2)
	require.Equal(t, "bin", m.MsgAttr[0].Name)
	require.Equal(t, "AAEC", m.MsgAttr[0].Value.BinaryValue)
	require.Equal(t, "Binary", m.MsgAttr[0].Value.DataType)
	require.Equal(t, "42", m.MsgAttr[1].Value.StringValue)
	require.NotEmpty(t, m.Attribute)

	status, body = queryRequest{params: url.Values{"Action": {"GetQueueUrl"}, "QueueName": {"nope"}}}.do(t, env, nil)
	requireQueryError(t, status, body, http.StatusBadRequest, "AWS.SimpleQueueService.NonExistentQueue")
	status, body = queryRequest{params: url.Values{"Action": {"Frobnicate"}}}.do(t, env, nil)
	requireQueryError(t, status, body, http.StatusBadRequest, "InvalidAction")
	status, body = queryRequest{path: "/000000000000/q1", params: url.Values{"Action": {"SendMessage"}}}.do(t, env, nil)
	requireQueryError(t, status, body, http.StatusBadRequest, "MissingParameter")
	status, body = queryRequest{params: url.Values{"Action": {"GetQueueAttributes"}, "QueueUrl": {queueURL(env, "q1")}, "AttributeName.1": {"VisibilityTimeout"}}}.do(t, env, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.True(t, contains(string(body), "<Attribute><Name>VisibilityTimeout</Name><Value>40</Value></Attribute>"), "%s", body)
}

// response is a raw answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// post sends body to / with header, signed as the admin key when sign.
func post(t *testing.T, env *ferrytest.Env, header http.Header, body string, sign bool) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, env.URL+"/", strings.NewReader(body))
	require.NoError(t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	if sign {
		sum := sha256.Sum256([]byte(body))
		creds := aws.Credentials{AccessKeyID: "admin", SecretAccessKey: ferrytest.AdminKey}
		require.NoError(t, v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "sqs", "us-east-1", time.Now()))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp.StatusCode, resp.Header, b}
}

// requireJSONError requires a JSON protocol error with the status and
// Query code (in x-amzn-query-error).
func requireJSONError(t *testing.T, r response, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.status, "%s", r.body)
	require.Equal(t, code+";Sender", r.header.Get("X-Amzn-Query-Error"), "%s", r.body)
	var e struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}
	require.NoError(t, json.Unmarshal(r.body, &e), "%s", r.body)
	require.True(t, strings.HasPrefix(e.Type, "com.amazonaws.sqs#"), "%s", r.body)
	require.NotEmpty(t, e.Message)
}

// TestMalformedRequests: junk in either protocol is a clear SQS error, a
// 4xx, and writes nothing.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	env := start(t)
	jsonHeader := func(action string) http.Header {
		return http.Header{"X-Amz-Target": {"AmazonSQS." + action}, "Content-Type": {"application/x-amz-json-1.0"}}
	}
	cases := []struct {
		name   string
		header http.Header
		body   string
		code   string
	}{
		{"bad JSON", jsonHeader("CreateQueue"), `{"QueueName": "junk"`, "SerializationException"},
		{"not an object", jsonHeader("CreateQueue"), `["junk"]`, "SerializationException"},
		{"wrong type", jsonHeader("CreateQueue"), `{"QueueName": 5}`, "SerializationException"},
		{"unknown action", jsonHeader("MakeCoffee"), `{}`, "UnknownOperationException"},
		{"bad target", http.Header{"X-Amz-Target": {"Other.CreateQueue"}, "Content-Type": {"application/x-amz-json-1.0"}}, `{}`, "UnknownOperationException"},
		{"over 1 MiB", jsonHeader("CreateQueue"), `{"QueueName":"junk","x":"` + strings.Repeat("a", 1<<20) + `"}`, "InvalidParameterValue"},
		{"bad queue name", jsonHeader("CreateQueue"), `{"QueueName":"junk junk"}`, "InvalidParameterValue"},
	}
	for _, tc := range cases {
		requireJSONError(t, post(t, env, tc.header, tc.body, true), http.StatusBadRequest, tc.code)
	}
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	r := post(t, env, form, "Action=CreateQueue&QueueName=junk%zz", true)
	requireQueryError(t, r.status, r.body, http.StatusBadRequest, "MalformedQueryString")
	r = post(t, env, form, "Action=CreateQueue&QueueName=junk&QueueName=junk2", true)
	requireQueryError(t, r.status, r.body, http.StatusBadRequest, "MalformedQueryString")
	r = post(t, env, form, "Action=CreateQueue&QueueName=junk&Attribute.x.Name=VisibilityTimeout", true)
	requireQueryError(t, r.status, r.body, http.StatusBadRequest, "MalformedQueryString")
	require.Empty(t, restQueues(t, env))
}
