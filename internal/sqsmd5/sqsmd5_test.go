package sqsmd5

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

// TestBody: known answers, the first from the AWS Java SDK v2's own
// checksum test (MessageMD5ChecksumInterceptorTest).
func TestBody(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		"Body": "ac101b32dda4448cf13a93fe283dddd8",
		"":     "d41d8cd98f00b204e9800998ecf8427e",
		"The quick brown fox jumps over the lazy dog": "9e107d9d372bb6826bd81d3542a419d6",
	} {
		require.Equal(t, want, Body(body), "%q", body)
	}
	// Bytes as sent: no Unicode normalisation ("é" composed vs decomposed).
	require.NotEqual(t, Body("\u00e9"), Body("e\u0301"))
}

func s(dataType, value string) Attribute { return Attribute{DataType: dataType, StringValue: value} }

// TestAttributesPublishedVectors: checksums published by others who
// computed them as SQS does — AWS's SQS developer guide examples (as kept in
// a JavaScript implementation's tests), samples YDB's SQS-compatible service
// labels as Amazon's, LocalStack's and sqslite's tests.
func TestAttributesPublishedVectors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		attrs map[string]Attribute
		want  string
	}{
		{map[string]Attribute{"SellerName": s("String", "Example Store")}, "cd28f3b68aeee4b2eac9c66f2f694b58"},
		{map[string]Attribute{
			"City": s("String", "Any City"), "PostalCode": s("String", "99065"),
			"Region": s("String", "WA"), "SellerName": s("String", "Example Store"),
		}, "66d793da93becb551e41562575418975"},
		{map[string]Attribute{
			"City": s("String", "Any City"), "PostalCode": s("String", "99065"), "PricePerGallon": s("Number", "1.99"),
			"Region": s("String", "WA"), "SellerName": s("String", "Example Store"),
		}, "10809b55e3d9b22c17220b7dbaf283ef"},
		{map[string]Attribute{
			"test_attribute_name_2": s("String", "test_attribute_value_2"),
			"test_attribute_name_1": s("String", "test_attribute_value_1"),
		}, "d53f3b558fe951154770f25cb63dbba9"},
		{map[string]Attribute{
			"test_attribute_name": {DataType: "Binary", BinaryValue: []byte("test_attribute_value")},
		}, "23f6bd27ea87aab7dfeadcc9aebee495"},
		{map[string]Attribute{"timestamp": s("Number", "1493147359900")}, "235c5c510d26fb653d073faed50ae77c"},
		{map[string]Attribute{"ordinal": s("Number", "1"), "category": s("String", "test")}, "d21ae90c49061e927f57df5f5d72be1f"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, Attributes(c.attrs), "%v", c.attrs)
	}
}

// TestDigestJavaSDKVector: the AWS Java SDK v2's own test vector
// (MessageMD5ChecksumInterceptorTest), which also hashes the list values
// SQS reserves (transport types 3 and 4), through the same digest code.
func TestDigestJavaSDKVector(t *testing.T) {
	t.Parallel()
	got := digest([]entry{
		{name: "String", dataType: "String", transport: transportString, values: [][]byte{[]byte("Value")}},
		{name: "Binary", dataType: "Binary", transport: transportBinary, values: [][]byte{{5}}},
		{name: "StringList", dataType: "String", transport: transportStringList, values: [][]byte{[]byte("ListValue")}},
		{name: "ByteList", dataType: "Binary", transport: transportBinaryList, values: [][]byte{{3}}},
	})
	require.Equal(t, "4b6959cf7735fdade89bc099b85b3234", got)
}

// TestAttributesLayout: custom labels, binary bytes and sorting, against the
// byte layout written out by hand.
func TestAttributesLayout(t *testing.T) {
	t.Parallel()
	attrs := map[string]Attribute{
		"a":  {DataType: "Binary.gif", BinaryValue: []byte{0x00, 0xff}},
		"B":  s("Number.float", "1.5"),
		"_x": s("String.custom", "ü"),
	}
	// Sorted "B" (0x42) < "_x" (0x5f) < "a" (0x61).
	layout := "00000001" + "42" + "0000000c" + "4e756d6265722e666c6f6174" + "01" + "00000003" + "312e35" +
		"00000002" + "5f78" + "0000000d" + "537472696e672e637573746f6d" + "01" + "00000002" + "c3bc" +
		"00000001" + "61" + "0000000a" + "42696e6172792e676966" + "02" + "00000002" + "00ff"
	require.Equal(t, md5Hex(t, layout), Attributes(attrs))
	for range 20 { // map order must not matter
		require.Equal(t, md5Hex(t, layout), Attributes(attrs))
	}
}

// TestSystemAttributes: MD5OfMessageSystemAttributes of an AWSTraceHeader,
// by hand.
func TestSystemAttributes(t *testing.T) {
	t.Parallel()
	const trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	layout := "0000000e" + hex.EncodeToString([]byte("AWSTraceHeader")) +
		"00000006" + "537472696e67" + "01" +
		"0000004a" + hex.EncodeToString([]byte(trace))
	require.Len(t, trace, 0x4a)
	require.Equal(t, md5Hex(t, layout), Attributes(map[string]Attribute{"AWSTraceHeader": s("String", trace)}))
}

func TestAttributesEmpty(t *testing.T) {
	t.Parallel()
	require.Empty(t, Attributes(nil))
	require.Empty(t, Attributes(map[string]Attribute{}))
	// An empty value still hashes (its length, 0, is part of the layout).
	require.Equal(t, md5Hex(t, "00000001"+"6e"+"00000006"+"537472696e67"+"01"+"00000000"),
		Attributes(map[string]Attribute{"n": s("String", "")}))
}

func TestIsBinary(t *testing.T) {
	t.Parallel()
	for dt, want := range map[string]bool{
		"Binary": true, "Binary.png": true, "Binary.": true,
		"String": false, "Number.Binary": false, "BinaryX": false, "binary": false, "": false,
	} {
		require.Equal(t, want, IsBinary(dt), dt)
	}
}

// TestCompareUTF16: Java's order, which differs from Go's byte order
// between characters above U+FFFF and those in U+E000–U+FFFF.
func TestCompareUTF16(t *testing.T) {
	t.Parallel()
	const emoji, fullwidthA = "\U0001F600", "\uFF21" // UTF-16 D83D DE00 vs FF21
	require.Negative(t, compareUTF16(emoji, fullwidthA))
	require.Positive(t, strings.Compare(emoji, fullwidthA), "byte order is the other way")
	names := []string{"b", fullwidthA, "a", emoji, "ab", "", "\U0001F601", "A"}
	slices.SortFunc(names, compareUTF16)
	require.Equal(t, []string{"", "A", "a", "ab", "b", emoji, "\U0001F601", fullwidthA}, names)
	require.Zero(t, compareUTF16("same", "same"))
	require.NotZero(t, compareUTF16("\xff", "\xfe"), "invalid UTF-8 still orders totally")

	attrs := map[string]Attribute{emoji: s("String", "1"), fullwidthA: s("String", "2")}
	layout := "00000004" + "f09f9880" + "00000006" + "537472696e67" + "01" + "00000001" + "31" +
		"00000003" + "efbca1" + "00000006" + "537472696e67" + "01" + "00000001" + "32"
	require.Equal(t, md5Hex(t, layout), Attributes(attrs))
}

func md5Hex(t *testing.T, layoutHex string) string {
	t.Helper()
	b, err := hex.DecodeString(layoutHex)
	require.NoError(t, err)
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// fakeSQS answers SendMessage, SendMessageBatch and ReceiveMessage in AWS
// JSON 1.0 with the checksums of this package (or, when corrupt, of a body
// one byte longer) so that the SDK's own validation judges them.
type fakeSQS struct {
	corrupt bool
	stored  string
}

func (f *fakeSQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var in struct {
		MessageBody string
		Entries     []struct{ Id, MessageBody string }
	}
	_ = json.Unmarshal(body, &in)
	md5Of := func(s string) string {
		if f.corrupt {
			s += " "
		}
		return Body(s)
	}
	var out any
	switch r.Header.Get("X-Amz-Target") {
	case "AmazonSQS.SendMessage":
		f.stored = in.MessageBody
		out = map[string]any{"MessageId": "m-1", "MD5OfMessageBody": md5Of(in.MessageBody)}
	case "AmazonSQS.SendMessageBatch":
		var ok []map[string]any
		for _, e := range in.Entries {
			ok = append(ok, map[string]any{"Id": e.Id, "MessageId": "m-" + e.Id, "MD5OfMessageBody": md5Of(e.MessageBody)})
		}
		out = map[string]any{"Successful": ok, "Failed": []any{}}
	case "AmazonSQS.ReceiveMessage":
		out = map[string]any{"Messages": []map[string]any{{
			"MessageId": "m-1", "ReceiptHandle": "r-1", "Body": f.stored, "MD5OfBody": md5Of(f.stored),
		}}}
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

// TestBodyValidatedBySDK: aws-sdk-go-v2's SQS client recomputes
// MD5OfMessageBody on SendMessage, SendMessageBatch and ReceiveMessage and
// accepts Body's; a wrong checksum makes the same calls fail, so the check
// is really made.
func TestBodyValidatedBySDK(t *testing.T) {
	t.Parallel()
	bodies := []string{"plain", "ünïcödé \u2603 \U0001F600", `{"json": [1, 2.5, "x"]}`, "tab\tnew\nline\r\n", "<xml>&amp;</xml>"}
	for _, corrupt := range []bool{false, true} {
		f := &fakeSQS{corrupt: corrupt}
		srv := httptest.NewServer(f)
		defer srv.Close()
		c := sqs.New(sqs.Options{
			Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), HTTPClient: srv.Client(), Retryer: aws.NopRetryer{},
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: "key_1", SecretAccessKey: "secret"}, nil
			}),
		})
		ctx := context.Background()
		queue := aws.String(srv.URL + "/000000000000/q")
		for _, body := range bodies {
			_, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: queue, MessageBody: aws.String(body)})
			checkValidated(t, corrupt, err)
			_, err = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: queue})
			checkValidated(t, corrupt, err)
		}
		entries := make([]types.SendMessageBatchRequestEntry, len(bodies))
		for i, body := range bodies {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(string(rune('a' + i))), MessageBody: aws.String(body)}
		}
		_, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: queue, Entries: entries})
		checkValidated(t, corrupt, err)
	}
}

func checkValidated(t *testing.T, corrupt bool, err error) {
	t.Helper()
	if !corrupt {
		require.NoError(t, err)
		return
	}
	require.Error(t, err)
	require.Contains(t, err.Error(), "checksum")
}
