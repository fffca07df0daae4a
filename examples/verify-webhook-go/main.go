// Command verify-webhook-go is a receiver for Ferry's webhook pushes, in Go
// with the standard library only (copy it; it does not import Ferry).
//
//	FERRY_SECRET=whsec_... go run ./examples/verify-webhook-go 8000
//
// Ferry signs every push in the Standard Webhooks format
// (https://www.standardwebhooks.com/, see docs/webhooks.md). This server
// verifies each POST, prints the event and answers 204 No Content; a request
// that fails verification gets 401 and is not processed. The verify
// function is all you need in your own application.
//
// Process each push idempotently: the same webhook-id can arrive more than
// once (a retry after a timeout, for instance). Keep the ids you have
// handled and answer 2xx without doing the work again.
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// tolerance is how far webhook-timestamp may be from our clock, either way.
const tolerance = 5 * time.Minute

// maxBody bounds the request body read; larger requests are refused.
const maxBody = 10 << 20

// verify checks one push: secret is the subscription's "whsec_..." signing
// secret, body the raw request body exactly as received (verify before any
// JSON decoding). It returns nil when the request is genuine and fresh.
func verify(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return fmt.Errorf("invalid secret: %w", err)
	}
	id := h.Get("webhook-id")
	ts := h.Get("webhook-timestamp")
	sigs := h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not unix seconds")
	}
	if d := now.Unix() - sec; d > int64(tolerance/time.Second) || d < -int64(tolerance/time.Second) {
		return errors.New("webhook-timestamp too old or in the future")
	}

	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := []byte(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	// During a secret rotation Ferry sends one signature per secret,
	// space-separated; any v1 one matching ours is enough.
	for _, field := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(field, ",")
		if ok && version == "v1" && hmac.Equal([]byte(sig), want) {
			return nil
		}
	}
	return errors.New("no matching signature")
}

func main() {
	secret := os.Getenv("FERRY_SECRET")
	if !strings.HasPrefix(secret, "whsec_") {
		log.Fatal("set FERRY_SECRET to the subscription's signing secret (whsec_...)")
	}
	if _, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_")); err != nil {
		log.Fatalf("FERRY_SECRET: %v", err)
	}
	port := "8000"
	if len(os.Args) > 1 {
		port = os.Args[1]
	}

	http.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			status := http.StatusBadRequest
			if errors.As(err, new(*http.MaxBytesError)) {
				status = http.StatusRequestEntityTooLarge
			}
			http.Error(w, "cannot read body", status)
			return
		}
		if err := verify(secret, r.Header, body, time.Now()); err != nil {
			log.Printf("refused: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		// Your processing goes here. Answer 2xx only once the work is done
		// (or durably recorded): a 2xx is Ferry's ack.
		fmt.Printf("webhook-id=%s event=%s\n", r.Header.Get("webhook-id"), body)
		w.WriteHeader(http.StatusNoContent)
	})

	srv := &http.Server{
		Addr:              ":" + port,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
	}
	log.Printf("listening on :%s", port)
	log.Fatal(srv.ListenAndServe())
}
