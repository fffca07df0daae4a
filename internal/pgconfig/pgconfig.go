// Package pgconfig holds what every one of Ferry's database connections
// (the server's pools, the notifier's LISTEN connection, migrations) sets
// up the same way.
package pgconfig

import (
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultConnectTimeout bounds each connection attempt to one host when
// the connection string sets no connect_timeout. A host that answers
// nothing (a primary whose machine is gone) holds an attempt until this
// timeout before pgx tries the next host of a multi-host URL; without
// one, an attempt waits as long as its context allows (forever, for a
// background context).
const DefaultConnectTimeout = 5 * time.Second

// keywordTimeout finds connect_timeout in a keyword/value connection
// string ("host=db connect_timeout=0").
var keywordTimeout = regexp.MustCompile(`(^|\s)connect_timeout\s*=`)

// BoundConnect sets c.ConnectTimeout to [DefaultConnectTimeout] unless
// connString (parsed into c) or PGCONNECT_TIMEOUT sets connect_timeout,
// 0 (no bound) included: pgx parses an explicit 0 and an absent value
// alike, so the string itself is read.
func BoundConnect(c *pgconn.Config, connString string) {
	if c.ConnectTimeout == 0 && !explicitConnectTimeout(connString) {
		c.ConnectTimeout = DefaultConnectTimeout
	}
}

// explicitConnectTimeout reports whether connString or the environment
// sets connect_timeout.
func explicitConnectTimeout(connString string) bool {
	if _, ok := os.LookupEnv("PGCONNECT_TIMEOUT"); ok {
		return true
	}
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		return err == nil && u.Query().Has("connect_timeout")
	}
	return keywordTimeout.MatchString(connString)
}
