package download

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Link is a signed download link and the moment it stops working.
type Link struct {
	URL       string
	ExpiresAt time.Time
}

// Links makes download links: the one place that does, so every link is
// absolute (it names FERRY_PUBLIC_URL), has its id escaped, and comes with
// its expiry. Issuers (files, grants, exports, chat attachments) call it
// once they have checked the user's rights; the proxy checks them again on
// every request.
type Links struct {
	signer Signer
	base   string
	ttl    time.Duration
}

// LinksConfig is what NewLinks needs.
type LinksConfig struct {
	Signer Signer
	// PublicURL is how clients reach ferry (scheme://host[:port]).
	PublicURL string
	// TTL is the lifetime of a link (FERRY_DOWNLOAD_LINK_TTL).
	TTL time.Duration
}

// NewLinks returns a Links.
func NewLinks(c LinksConfig) (*Links, error) {
	if c.Signer == nil || c.TTL <= 0 {
		return nil, errors.New("download: links need a signer and a positive TTL")
	}
	u, err := url.Parse(c.PublicURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("download: links need an absolute http(s) public URL")
	}
	return &Links{signer: c.Signer, base: strings.TrimRight(c.PublicURL, "/"), ttl: c.TTL}, nil
}

// TTL is the lifetime of a link made by Link.
func (l *Links) TTL() time.Duration { return l.ttl }

// Link returns a link to resource id for userID, valid for the TTL.
func (l *Links) Link(id, userID string) Link { return l.For(id, userID, l.ttl) }

// For returns a link to resource id for userID valid for ttl, or for the
// TTL when ttl is not positive or longer: a grant that ends sooner gets a
// link that ends with it, never a longer one.
func (l *Links) For(id, userID string, ttl time.Duration) Link {
	if ttl <= 0 || ttl > l.ttl {
		ttl = l.ttl
	}
	q := l.signer.Sign(PathPrefix+id, id, userID, ttl)
	exp, _ := strconv.ParseInt(q.Get("exp"), 10, 64) // the signer's own clock decides
	return Link{URL: l.base + PathPrefix + url.PathEscape(id) + "?" + q.Encode(), ExpiresAt: time.Unix(exp, 0).UTC()}
}
