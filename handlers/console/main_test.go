package console_test

import (
	"testing"

	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
