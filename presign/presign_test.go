package presign

import (
	"errors"
	"net/url"
	"testing"
	"time"
)

func keys(t *testing.T, s string) []Key {
	t.Helper()
	k, err := ParseKeys(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const (
	k1 = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	k2 = "k2:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
)

func TestSignVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	s, _ := NewSigner(keys(t, k1), clock)
	q := s.Sign("/download/exp_1", "exp_1", "usr_a", 5*time.Minute)
	c, err := s.Verify("/download/exp_1", "exp_1", q)
	if err != nil || c.User != "usr_a" || c.KeyID != "k1" {
		t.Fatalf("verify: %+v %v", c, err)
	}

	tamper := func(field, value string) url.Values {
		out := url.Values{}
		for k, v := range q {
			out[k] = append([]string{}, v...)
		}
		out.Set(field, value)
		return out
	}
	for name, c := range map[string]struct {
		path, res string
		q         url.Values
		want      error
	}{
		"other user":       {"/download/exp_1", "exp_1", tamper("u", "usr_b"), ErrBadSignature},
		"later expiry":     {"/download/exp_1", "exp_1", tamper("exp", "1900000000"), ErrBadSignature},
		"padded expiry":    {"/download/exp_1", "exp_1", tamper("exp", "0"+q.Get("exp")), ErrMalformed},
		"other resource":   {"/download/exp_2", "exp_2", q, ErrBadSignature},
		"unknown key":      {"/download/exp_1", "exp_1", tamper("kid", "k9"), ErrUnknownKey},
		"bad sig encoding": {"/download/exp_1", "exp_1", tamper("sig", "***"), ErrMalformed},
		"flipped sig":      {"/download/exp_1", "exp_1", tamper("sig", flip(q.Get("sig"))), ErrBadSignature},
		"missing field":    {"/download/exp_1", "exp_1", url.Values{"u": q["u"], "exp": q["exp"], "kid": q["kid"]}, ErrMalformed},
		"repeated field":   {"/download/exp_1", "exp_1", url.Values{"u": {"usr_a", "usr_b"}, "exp": q["exp"], "kid": q["kid"], "sig": q["sig"]}, ErrMalformed},
	} {
		if _, err := s.Verify(c.path, c.res, c.q); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}

	now = now.Add(5 * time.Minute)
	if _, err := s.Verify("/download/exp_1", "exp_1", q); !errors.Is(err, ErrExpired) {
		t.Fatalf("at expiry: %v, want ErrExpired", err)
	}
}

func flip(s string) string {
	b := []byte(s)
	if b[0] == 'A' {
		b[0] = 'B'
	} else {
		b[0] = 'A'
	}
	return string(b)
}

func TestRotation(t *testing.T) {
	old, _ := NewSigner(keys(t, k1), time.Now)
	link := old.Sign("/download/f", "f", "u", time.Minute)
	rotated, _ := NewSigner(keys(t, k2+","+k1), time.Now)
	if _, err := rotated.Verify("/download/f", "f", link); err != nil {
		t.Fatalf("old link after rotation: %v", err)
	}
	if got := rotated.Sign("/download/f", "f", "u", time.Minute).Get("kid"); got != "k2" {
		t.Fatalf("rotated signer signs with %s, want k2", got)
	}
	dropped, _ := NewSigner(keys(t, k2), time.Now)
	if _, err := dropped.Verify("/download/f", "f", link); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("link of a removed key: %v, want ErrUnknownKey", err)
	}
}

func TestParseKeys(t *testing.T) {
	ks, err := ParseKeys(k1 + ", " + k2)
	if err != nil || len(ks) != 2 || FormatKeys(ks) != k1+","+k2 {
		t.Fatalf("%v %v %s", ks, err, FormatKeys(ks))
	}
	for _, bad := range []string{"", "k1", "k1:", k1 + "," + k1, "k/1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "k1:c2hvcnQ="} {
		if _, err := ParseKeys(bad); err == nil {
			t.Errorf("ParseKeys(%q) accepted", bad)
		}
	}
}
