// Package openapi holds Ferry's HTTP API contract, openapi.yaml: the
// machine-readable form of the API v1 (OpenAPI 3.0.3). The server serves it
// at GET /openapi.yaml, and tests check every response they receive against
// it with package openapitest.
package openapi

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"

	"github.com/getkin/kin-openapi/openapi3"
)

//go:embed openapi.yaml
var spec []byte

// Spec returns the OpenAPI document as YAML, exactly as it is in
// openapi.yaml. The slice is a copy: callers may keep or change it.
func Spec() []byte {
	return bytes.Clone(spec)
}

// Load parses the OpenAPI document and validates it against the OpenAPI 3.0
// rules (references resolve, schemas and examples are well formed). Every call
// returns a new document, so callers may change theirs.
func Load() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("openapi: parse openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi: validate openapi.yaml: %w", err)
	}
	return doc, nil
}
