// Command worker is the worker process the client's kill -9 test builds
// and kills: it runs client.Work on FERRY_QUEUE, printing "start <id>"
// when a handler begins, "done <id>" when it returns, and "acked <n>" for
// every ack answer (n receipts acked ok).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ferry-mq/ferry/client"
)

var out sync.Mutex

func say(format string, args ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf(format+"\n", args...)
}

// ackCounter prints how many receipts each ack answer acked.
type ackCounter struct{}

func (ackCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, "/ack") || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var res struct {
		Results []client.ReceiptResult `json:"results"`
	}
	_ = json.Unmarshal(raw, &res)
	n := 0
	for _, r := range res.Results {
		if r.Status == "ok" {
			n++
		}
	}
	say("acked %d", n)
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	return resp, nil
}

func main() {
	c := client.New(os.Getenv("FERRY_URL"), os.Getenv("FERRY_KEY"), client.WithHTTPClient(&http.Client{Transport: ackCounter{}}))
	handle, _ := time.ParseDuration(os.Getenv("HANDLE"))
	err := c.Work(context.Background(), os.Getenv("FERRY_QUEUE"), func(ctx context.Context, m *client.Message) error {
		say("start %s", m.ID)
		time.Sleep(handle)
		say("done %s", m.ID)
		return nil
	}, client.WorkOptions{Concurrency: 3, WaitSeconds: 1})
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
