package handlers

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// ProblemListener wraps the server's listener so that the few answers
// net/http writes by itself, in plain text, are problems like every other:
// a request it cannot parse (a bad %-escape in the path, a malformed
// header line, a missing Host) is refused before any handler runs, with
// "HTTP/1.1 400 Bad Request", Content-Type text/plain and Connection:
// close, written straight to the connection in one Write. The connection
// recognises exactly that shape, which no handler's answer has (those
// carry X-Request-Id and Date before the blank line), and writes the
// problem instead.
func ProblemListener(ln net.Listener) net.Listener { return problemListener{ln} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c}, nil
}

type problemConn struct{ net.Conn }

// plainErrorHeaders is what net/http's conn.serve writes between the status
// line and the body of its own error answers.
const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *problemConn) Write(p []byte) (int, error) {
	if q, ok := plainErrorAsProblem(p); ok {
		if _, err := c.Conn.Write(q); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// CloseWrite half-closes the connection, as net/http does before it closes
// one (so the client reads the whole answer).
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// plainErrorAsProblem rewrites one of net/http's own error answers, e.g.
// "HTTP/1.1 400 Bad Request" + plainErrorHeaders + "400 Bad Request: missing
// required Host header", as a problem.
func plainErrorAsProblem(p []byte) ([]byte, bool) {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(p, []byte(proto)) {
		return nil, false
	}
	eol := bytes.Index(p, []byte("\r\n"))
	if eol < 0 || !bytes.HasPrefix(p[eol:], []byte(plainErrorHeaders)) {
		return nil, false
	}
	statusLine := string(p[len(proto):eol])
	status, err := strconv.Atoi(statusLine[:min(3, len(statusLine))])
	if err != nil || status < 400 || status > 599 {
		return nil, false
	}
	text := string(p[eol+len(plainErrorHeaders):])
	code, detail := codeInvalid, "the request could not be parsed (e.g. a bad %-escape in its path, or a malformed header)"
	switch {
	case status == http.StatusRequestHeaderFieldsTooLarge:
		code, detail = codeTooLarge, "the request's headers are too large"
	case status >= 500:
		detail = "the request could not be handled: " + text
	default:
		if _, reason, ok := strings.Cut(text, ": "); ok {
			detail = "the request could not be parsed: " + reason
		}
	}
	pr := problem(status, code, detail)
	var body bytes.Buffer
	_ = jsonEncode(&body, pr)
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/problem+json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), body.Len(), body.Bytes()), true
}
