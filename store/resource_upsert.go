package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// upsert is the skeleton that QueueUpsert, TopicUpsert and
// SubscriptionUpsert share. In one transaction, run again on a deadlock, a
// serialization failure or a lost creation race (isRetryable), it locks the
// row or finds it missing, merges the patch into the row's settings (into
// the defaults when the row is to be created), and, unless nothing changes
// (then updated_at stays and the existing row is the answer), writes it.
// R is the row, S the settings it is to have; the steps are the parts that
// differ by resource.
type upsert[R, S any] struct {
	// lock reads the row FOR UPDATE (and takes whatever lock orders the
	// change before it); pgx.ErrNoRows: the row is to be created.
	lock func(ctx context.Context, tx pgx.Tx) (R, error)
	// merge returns the settings the patch makes of existing's (of the
	// defaults when created), validated.
	merge func(existing R, created bool) (S, error)
	// same reports whether existing has the settings next already.
	same func(next S, existing R) bool
	// write inserts or updates the row with next and returns it; it
	// returns errCreateRaced (see createRaced) when it was to create the
	// row and another transaction created it first.
	write func(ctx context.Context, tx pgx.Tx, next S, created bool) (R, error)
}

// run runs the upsert and reports whether it created the row. Its error
// is as the steps returned it: the caller names the operation
// (upsertError).
func (u upsert[R, S]) run(ctx context.Context, db TxBeginner) (R, bool, error) {
	var (
		row     R
		created bool
	)
	// A lost creation race means another transaction created (or, racing
	// deletes, created and deleted) the row meanwhile: each loss is
	// someone else's progress, so more attempts than retry's three, and
	// one that still loses is busy (503), not a server error.
	err := retryN(ctx, upsertAttempts, func() error {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			existing, err := u.lock(ctx, tx)
			created = errors.Is(err, pgx.ErrNoRows)
			if err != nil && !created {
				return err
			}
			next, err := u.merge(existing, created)
			if err != nil {
				return err
			}
			if !created && u.same(next, existing) {
				row = existing // nothing changes: updated_at stays
				return nil
			}
			row, err = u.write(ctx, tx, next, created)
			return err
		})
	})
	if errors.Is(err, errCreateRaced) {
		err = ErrBusy
	}
	return row, created, err
}

// upsertAttempts bounds the attempts of an upsert that keeps losing its
// creation race (a create racing deletes and creates of the same name).
const upsertAttempts = 10

// createRaced reads the error of an upsert statement that, when creating,
// updates nothing if another transaction created the row first
// (INSERT ... ON CONFLICT DO UPDATE ... WHERE NOT created): no row means
// that race, and the upsert runs again as an update.
func createRaced(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return errCreateRaced
	}
	return err
}

// upsertError names the operation of a failed upsert; the client's
// mistakes (*ValidationError, *ShrinkError) are returned as they are.
func upsertError(op string, err error) error {
	var (
		verr   *ValidationError
		shrink *ShrinkError
	)
	switch {
	case errors.As(err, &verr):
		return verr
	case errors.As(err, &shrink):
		return shrink
	}
	return interpretError(op, err)
}

// UpsertWakes is what a committed upsert of a queue or a subscription asks
// to wake; the store decides it ([QueuePatch.Wakes], [SubscriptionPatch.Wakes]),
// the caller passes it on.
type UpsertWakes struct {
	// PushChanged: the PUT gave push settings. The target's push workers,
	// on every instance, read them again (a NOTIFY of its
	// PushConfigWakeKey), and this instance's push delivery its set of
	// targets.
	PushChanged bool
	// PushKick: start pushing the target's messages now rather than at the
	// next sweep (push is on and not disabled).
	PushKick bool
	// Claimable: the upsert made messages claimable (a subscription's
	// backfill on creation), due at their events' publish time: wake the
	// target's long polls, its claims here forgetting their floor first
	// (store.Notifier.Rewound).
	Claimable bool
}
