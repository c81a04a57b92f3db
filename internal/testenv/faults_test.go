package testenv_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// The S3 a test gets from S3ThroughProxy really is behind the proxy: while
// the proxy refuses, S3 calls fail (within the SDK's retries, not
// minutes), and they work again once it accepts.
func TestS3ThroughProxy(t *testing.T) {
	srv, p := testenv.S3ThroughProxy(t)
	st := testenv.StoreFor(t, srv, "t-"+testenv.RandomHex(6))
	ctx := context.Background()
	if err := st.Put(ctx, "a", bytes.NewReader([]byte("abc")), 3, ""); err != nil {
		t.Fatal(err)
	}
	p.Refuse()
	p.ResetAll()
	start := time.Now()
	if _, err := st.Head(ctx, "a"); err == nil {
		t.Fatal("HeadObject succeeded while the proxy refused connections")
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("HeadObject took %s to fail against a refusing proxy", el)
	}
	if err := p.Accept(); err != nil {
		t.Fatal(err)
	}
	if info, err := st.Head(ctx, "a"); err != nil || info.Size != 3 {
		t.Fatalf("after Accept: %+v, %v", info, err)
	}
	if s := p.Stats(); s.Accepted == 0 || s.BytesUp == 0 || s.BytesDown == 0 {
		t.Fatalf("no traffic went through the proxy: %+v", s)
	}
}

// Likewise for MariaDB: queries fail while the proxy refuses and resets,
// and database/sql reconnects once it accepts again.
func TestMySQLThroughProxy(t *testing.T) {
	dsn, p := testenv.MySQLThroughProxy(t)
	db, err := models.Open(context.Background(), models.MySQL, dsn, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { sqlDB.Close() })
	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return sqlDB.PingContext(ctx)
	}
	if err := ping(); err != nil {
		t.Fatal(err)
	}
	p.Refuse()
	if n := p.ResetAll(); n == 0 {
		t.Fatal("no open connection went through the proxy")
	}
	if err := ping(); err == nil {
		t.Fatal("ping succeeded while the proxy refused connections")
	}
	if err := p.Accept(); err != nil {
		t.Fatal(err)
	}
	if err := ping(); err != nil {
		t.Fatalf("after Accept: %v", err)
	}
}
