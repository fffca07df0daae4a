package handlers

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
)

// A receive's answer, {"messages":[...]}, written as reply_events.go
// writes events: encoding/json's bytes (FuzzMessagesReplyAsEncodingJSON),
// without its reflection and its second pass over every body.

// replyReceived answers a queue's receive.
func replyReceived(c echo.Context, msgs []receivedMessageReply) error {
	n := 16
	for i := range msgs {
		n += 192 + len(msgs[i].Body) + len(msgs[i].Attributes)
	}
	b := append(make([]byte, 0, n), `{"messages":`...)
	if msgs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range msgs {
			if i > 0 {
				b = append(b, ',')
			}
			b = msgs[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	return replyJSON(c, http.StatusOK, append(b, "}\n"...))
}

// appendJSON appends the message as encoding/json encodes
// receivedMessageReply (its head's fields first).
func (m *receivedMessageReply) appendJSON(b []byte) []byte {
	b = appendJSONString(append(b, `{"id":`...), m.ID)
	b = appendCompactJSON(append(b, `,"body":`...), m.Body)
	b = appendCompactJSON(append(b, `,"attributes":`...), m.Attributes)
	b = appendOptionalString(append(b, `,"group":`...), m.Group)
	b = appendOptionalString(append(b, `,"dedup_id":`...), m.DedupID)
	b = appendJSONString(append(b, `,"receipt":`...), m.Receipt)
	b = strconv.AppendInt(append(b, `,"receive_count":`...), int64(m.ReceiveCount), 10)
	b = m.SentAt.AppendFormat(append(b, `,"sent_at":"`...), time.RFC3339Nano)
	return append(b, `"}`...)
}

// replySubscriptionMessages answers a subscription's receive.
func replySubscriptionMessages(c echo.Context, msgs []subscriptionMessageReply) error {
	n := 16
	for i := range msgs {
		n += 128 + len(msgs[i].Event)
	}
	b := append(make([]byte, 0, n), `{"messages":`...)
	if msgs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, m := range msgs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(append(b, `{"id":`...), m.ID)
			b = appendCompactJSON(append(b, `,"event":`...), m.Event)
			b = appendJSONString(append(b, `,"receipt":`...), m.Receipt)
			b = strconv.AppendInt(append(b, `,"receive_count":`...), int64(m.ReceiveCount), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return replyJSON(c, http.StatusOK, append(b, "}\n"...))
}
