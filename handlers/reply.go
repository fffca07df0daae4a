package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"
)

func jsonEncode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// reply answers v as JSON with the given status. It encodes v whole
// before it writes anything: a value that cannot be encoded is an error,
// which the error handler logs and answers as a 500 problem, never the
// status with a body cut short.
func reply(c echo.Context, status int, v any) error {
	var b bytes.Buffer
	if err := jsonEncode(&b, v); err != nil {
		return fmt.Errorf("encode the answer: %w", err)
	}
	return c.Blob(status, echo.MIMEApplicationJSON, b.Bytes())
}

// putStatus is a PUT's status: 201 when it created the resource.
func putStatus(created bool) int {
	if created {
		return http.StatusCreated
	}
	return http.StatusOK
}
