package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// DBHealth is what decides whether Ferry's tables stay small: their sizes
// and dead tuples, and what holds vacuum back. A queue claimed with SKIP
// LOCKED churns rows (every claim and ack leaves dead tuples); vacuum can
// remove a dead tuple only once no transaction may still see it, so one
// transaction left open (an idle-in-transaction session, a forgotten
// prepared transaction, a replication slot nobody reads) makes every
// queue bloat, and claims slow down as they step over dead index entries.
type DBHealth struct {
	Tables []TableHealth
	// OldestXactAge is, by holder ("backend": client sessions of this
	// database; "prepared_xact": prepared transactions of this database),
	// how long the oldest open transaction has been open (0 when none).
	OldestXactAge map[string]time.Duration
	// XminAge is, by holder ("backend", "prepared_xact",
	// "replication_slot"), how many transactions old the oldest xmin it
	// holds back is (age(xmin); 0 when none). Rows deleted after it stay.
	XminAge map[string]int64
}

// TableHealth is one table's size and tuples, as the statistics say.
type TableHealth struct {
	Table      string // schema.name
	TableBytes int64  // heap, free space map, visibility map and TOAST
	IndexBytes int64
	LiveTuples int64
	DeadTuples int64
	// SinceVacuum is the time since the last vacuum (auto or manual); nil
	// if the statistics know of none.
	SinceVacuum *time.Duration
}

// DBHealthRead reads Ferry's tables (schema ferry, and River's river_job)
// and the holders of the oldest transactions and xmins, in one
// transaction of two statements (it writes nothing). Neither scans a table: sizes come from
// the relation files, tuples from the statistics. Seeing other roles'
// sessions needs pg_read_all_stats (e.g. through pg_monitor); without it
// only Ferry's own sessions count. Size functions take a relation's
// AccessShareLock: a lock_timeout keeps a table being truncated or
// rewritten from holding the read up.
func DBHealthRead(ctx context.Context, db TxBeginner) (DBHealth, error) {
	h := DBHealth{OldestXactAge: map[string]time.Duration{}, XminAge: map[string]int64{}}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', '1s', true)`); err != nil {
			return err
		}
		var err error
		if h.Tables, err = dbHealthTables(ctx, tx); err != nil {
			return err
		}
		return dbHealthXacts(ctx, tx, &h)
	})
	if err != nil {
		return DBHealth{}, interpretError("db health", err)
	}
	return h, nil
}

// dbHealthTables reads the sizes and tuples of Ferry's tables.
func dbHealthTables(ctx context.Context, tx pgx.Tx) ([]TableHealth, error) {
	rows, err := tx.Query(ctx, `/* ferry:db_health_tables */
		SELECT n.nspname || '.' || c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid),
			coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0),
			extract(epoch FROM now() - greatest(s.last_autovacuum, s.last_vacuum))::float8
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
		WHERE c.relkind = 'r' AND (n.nspname = 'ferry' OR c.oid = to_regclass('river_job'))
		UNION ALL
		-- A partitioned table (ferry.messages) as the sum of its partitions,
		-- which are listed too; vacuumed when its last partition was.
		SELECT n.nspname || '.' || c.relname, sum(pg_table_size(l.relid))::bigint, sum(pg_indexes_size(l.relid))::bigint,
			sum(coalesce(s.n_live_tup, 0))::bigint, sum(coalesce(s.n_dead_tup, 0))::bigint,
			extract(epoch FROM now() - max(greatest(s.last_autovacuum, s.last_vacuum)))::float8
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		CROSS JOIN LATERAL pg_partition_tree(c.oid) l
		LEFT JOIN pg_stat_all_tables s ON s.relid = l.relid
		WHERE c.relkind = 'p' AND n.nspname = 'ferry' AND l.isleaf
		GROUP BY 1
		ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (TableHealth, error) {
		var (
			t    TableHealth
			secs *float64
		)
		err := row.Scan(&t.Table, &t.TableBytes, &t.IndexBytes, &t.LiveTuples, &t.DeadTuples, &secs)
		if secs != nil {
			d := time.Duration(*secs * float64(time.Second))
			t.SinceVacuum = &d
		}
		return t, err
	})
}

// dbHealthXacts reads the oldest transactions and xmins by holder.
func dbHealthXacts(ctx context.Context, tx pgx.Tx, h *DBHealth) error {
	var (
		backendAge, preparedAge             float64
		backendXmin, preparedXmin, slotXmin int64
	)
	err := tx.QueryRow(ctx, `/* ferry:db_health_xacts */
		SELECT
			coalesce(extract(epoch FROM now() - min(a.xact_start) FILTER (
				WHERE a.datname = current_database() AND a.backend_type = 'client backend')), 0)::float8,
			coalesce(max(age(a.backend_xmin)) FILTER (WHERE a.backend_type <> 'autovacuum worker'), 0)::bigint,
			(SELECT coalesce(extract(epoch FROM now() - min(p.prepared)), 0)::float8
			 FROM pg_prepared_xacts p WHERE p.database = current_database()),
			(SELECT coalesce(max(age(p.transaction)), 0)::bigint
			 FROM pg_prepared_xacts p WHERE p.database = current_database()),
			(SELECT coalesce(max(greatest(age(r.xmin), age(r.catalog_xmin))), 0)::bigint
			 FROM pg_replication_slots r WHERE r.database IS NULL OR r.database = current_database())
		FROM pg_stat_activity a
		WHERE a.pid <> pg_backend_pid() AND (a.datname = current_database() OR a.datname IS NULL)`).
		Scan(&backendAge, &backendXmin, &preparedAge, &preparedXmin, &slotXmin)
	if err != nil {
		return err
	}
	h.OldestXactAge["backend"] = time.Duration(backendAge * float64(time.Second))
	h.OldestXactAge["prepared_xact"] = time.Duration(preparedAge * float64(time.Second))
	h.XminAge["backend"], h.XminAge["prepared_xact"], h.XminAge["replication_slot"] = backendXmin, preparedXmin, slotXmin
	return nil
}
