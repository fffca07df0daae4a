package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// The SQL API (API.md § SQL API) is a set of functions in schema ferry
// (store/definitions), that applications call inside their own
// transactions. What they share with REST lives here and in the
// definitions (validation.sql, commit.sql): the request limits they
// apply, and the depth counters of a caller's transaction (ferry.counts_per_transaction:
// counted at its commit, so that a transaction held open after a SQL send
// or ack locks no counter row that REST writers need).

// SQLLimitsSet makes the SQL API apply the REST request limits: the
// largest body (with attributes) of one message or event, and the most
// items of one batch. It writes only when they differ from what the
// database has (a restart with the same configuration writes nothing).
// With several instances the last one started sets them: configure them
// alike.
func SQLLimitsSet(ctx context.Context, db DBTX, maxBodyBytes, maxBatch int) error {
	_, err := db.Exec(ctx, `/* ferry:sql_limits_set */
		UPDATE ferry.sql_limits SET max_body_bytes = $1, max_batch = $2
		WHERE (max_body_bytes, max_batch) IS DISTINCT FROM ($1::integer, $2::integer)`, maxBodyBytes, maxBatch)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		// A schema older than 000009 (FERRY_SKIP_MIGRATIONS): no SQL
		// API to configure.
		return nil
	}
	return interpretError("sql limits", err)
}

// IsolationCheck refuses a database session that does not run its
// transactions in READ COMMITTED by default: the engine's statements (a
// claim, an ack, the promotion of a group's next message) must see what
// committed while they waited for a lock, which a REPEATABLE READ or
// SERIALIZABLE snapshot does not (an ack would leave a group with no
// head). The SQL API's consumer functions refuse such a transaction
// themselves; Ferry's own sessions call the engine directly, so serve
// checks them once at start (ALTER ROLE or ALTER DATABASE ... SET
// default_transaction_isolation gives every session another default).
func IsolationCheck(ctx context.Context, db DBTX) error {
	var level string
	if err := db.QueryRow(ctx, `/* ferry:isolation_check */ SELECT current_setting('transaction_isolation')`).Scan(&level); err != nil {
		return interpretError("isolation check", err)
	}
	if level != "read committed" {
		return fmt.Errorf("the database runs transactions in %s by default; Ferry needs READ COMMITTED "+
			"(ALTER ROLE <ferry's role> SET default_transaction_isolation = 'read committed')", strings.ToUpper(level))
	}
	return nil
}

// SQLLimits reads the limits the SQL API applies.
func SQLLimits(ctx context.Context, db DBTX) (maxBodyBytes, maxBatch int, err error) {
	err = db.QueryRow(ctx, `/* ferry:sql_limits */ SELECT max_body_bytes, max_batch FROM ferry.sql_limits`).
		Scan(&maxBodyBytes, &maxBatch)
	return maxBodyBytes, maxBatch, interpretError("sql limits", err)
}
