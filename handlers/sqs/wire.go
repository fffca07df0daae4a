package sqs

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
)

// xmlNamespace is the namespace of every Query protocol answer.
const xmlNamespace = "http://queue.amazonaws.com/doc/2012-11-05/"

// requestID is the id the REST middleware gave the request (X-Request-Id),
// which SQS answers call RequestId.
func requestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}

// writeResult answers out (nil: an action without a result) in the
// request's protocol. It encodes the answer whole before it writes.
func (f *face) writeResult(cl *call, out any) error {
	c := cl.c
	c.Response().Header().Set("X-Amzn-RequestId", requestID(c))
	if cl.proto == protoJSON {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if out == nil {
			out = struct{}{}
		}
		if err := enc.Encode(out); err != nil {
			return f.writeError(cl, fmt.Errorf("encode the answer: %w", err))
		}
		return c.Blob(http.StatusOK, "application/x-amz-json-1.0", b.Bytes())
	}
	var b bytes.Buffer
	b.WriteString(xml.Header)
	fmt.Fprintf(&b, `<%sResponse xmlns="%s">`, cl.action, xmlNamespace)
	if out != nil {
		enc := xml.NewEncoder(&b)
		if err := enc.EncodeElement(out, xml.StartElement{Name: xml.Name{Local: cl.action + "Result"}}); err != nil {
			return f.writeError(cl, fmt.Errorf("encode the answer: %w", err))
		}
	}
	fmt.Fprintf(&b, `<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>`, requestID(c), cl.action)
	return c.Blob(http.StatusOK, "text/xml", b.Bytes())
}

// errorXML is the Query protocol's error answer.
type errorXML struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Error   struct {
		Type    string
		Code    string
		Message string
		Detail  struct{}
	}
	RequestID string `xml:"RequestId"`
}

// writeError answers err in the request's protocol's error shape; a
// server fault is logged with the request id, its cause never shown.
func (f *face) writeError(cl *call, err error) error {
	c := cl.c
	e, internal := toAPIError(err)
	if internal && cl.ctx.Err() == nil {
		f.Log.Error("sqs request failed", "request_id", requestID(c), "action", cl.action, "error", err)
	}
	fault := "Sender"
	if !e.Sender {
		fault = "Receiver"
	}
	h := c.Response().Header()
	h.Set("X-Amzn-RequestId", requestID(c))
	if e.Status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	if cl.proto == protoJSON {
		h.Set("X-Amzn-Query-Error", e.Code+";"+fault)
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(map[string]string{"__type": "com.amazonaws.sqs#" + e.Shape, "message": e.Message})
		return c.Blob(e.Status, "application/x-amz-json-1.0", b.Bytes())
	}
	x := errorXML{Xmlns: xmlNamespace, RequestID: requestID(c)}
	x.Error.Type, x.Error.Code, x.Error.Message = fault, e.Code, e.Message
	var b bytes.Buffer
	b.WriteString(xml.Header)
	_ = xml.NewEncoder(&b).Encode(x)
	return c.Blob(e.Status, "text/xml", b.Bytes())
}

// attrMap is a map of names to strings: a JSON object, and in XML one
// <Name>/<Value> element per entry (sorted), named as its field.
type attrMap map[string]string

// MarshalXML writes one element per entry.
func (m attrMap) MarshalXML(e *xml.Encoder, start xml.StartElement) error {
	for _, k := range sortedKeys(m) {
		entry := struct {
			Name  string
			Value string
		}{k, m[k]}
		if err := e.EncodeElement(entry, start); err != nil {
			return err
		}
	}
	return nil
}

// attrValue is a message attribute as SQS carries it; in JSON BinaryValue
// is base64, as encoding/json writes []byte.
type attrValue struct {
	DataType    string  `json:"DataType"`
	StringValue *string `json:"StringValue,omitempty"`
	BinaryValue []byte  `json:"BinaryValue,omitempty"`
	// The list values SQS reserves; refused when given.
	StringListValues []string `json:"StringListValues,omitempty" query:"StringListValue"`
	BinaryListValues [][]byte `json:"BinaryListValues,omitempty" query:"-"`
}

// msgAttrMap is message attributes by name: in XML one
// <Name>/<Value><StringValue|BinaryValue/><DataType/></Value> element per
// entry, named as its field.
type msgAttrMap map[string]attrValue

// MarshalXML writes one element per attribute.
func (m msgAttrMap) MarshalXML(e *xml.Encoder, start xml.StartElement) error {
	type value struct {
		StringValue *string `xml:",omitempty"`
		BinaryValue *string `xml:",omitempty"`
		DataType    string
	}
	for _, k := range sortedKeys(m) {
		a := m[k]
		v := value{StringValue: a.StringValue, DataType: a.DataType}
		if a.BinaryValue != nil {
			s := base64.StdEncoding.EncodeToString(a.BinaryValue)
			v.BinaryValue = &s
		}
		entry := struct {
			Name  string
			Value value
		}{k, v}
		if err := e.EncodeElement(entry, start); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// baseURL is the base of the request's QueueUrls: PublicURL, else the
// scheme and Host the request came with.
func (f *face) baseURL(cl *call) string {
	if f.PublicURL != "" {
		return strings.TrimSuffix(f.PublicURL, "/")
	}
	return cl.c.Scheme() + "://" + cl.c.Request().Host
}

// queueURL is the QueueUrl of the named queue.
func (f *face) queueURL(cl *call, name string) string {
	return f.baseURL(cl) + "/" + AccountID + "/" + name
}

// queueARN is the QueueArn of the named queue, in the region the request
// was signed for.
func queueARN(cl *call, name string) string {
	return "arn:aws:sqs:" + cl.region + ":" + AccountID + ":" + name
}
