package server_test

import (
	"testing"

	"github.com/ferry-mq/ferry/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
