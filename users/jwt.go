package users

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/ferry-io/ferry/errkind"
)

// Algorithms are the JWS algorithms ferry accepts from a host app. Every
// other one is refused before any key is looked at: "none", and HS*, whose
// "secret" an attacker would take from the published public key.
var Algorithms = []string{"RS256", "ES256", "EdDSA"}

// JWTLeeway is the clock skew allowed on exp, nbf and iat.
const JWTLeeway = 60 * time.Second

// maxJWT bounds the size of a token ferry parses at all.
const maxJWT = 8 << 10

// JWTConfig says whose JWTs to trust. Give JWKSURL or Keys.
type JWTConfig struct {
	Issuer   string // the iss every token must carry
	Audience string // an aud every token must carry
	JWKSURL  string // the issuer's JWK Set
	Keys     []crypto.PublicKey
	// AdminClaim names a claim that makes the user an administrator while
	// it is true; empty leaves the admin flag to ferry.
	AdminClaim string
	Log        *slog.Logger
	Now        func() time.Time // nil: time.Now
	// Client fetches the JWK Set; nil: one with a 10 s timeout. Redirects
	// are never followed, so an https:// URL cannot lead to http://.
	Client *http.Client
	// RefreshUnknownKID bounds how often a token with an unknown kid
	// refetches the JWK Set (default one minute); RefreshEvery is the
	// periodic refetch (default one hour).
	RefreshUnknownKID time.Duration
	RefreshEvery      time.Duration
}

// Identity is who a valid JWT names.
type Identity struct {
	Issuer  string
	Subject string
	Name    string // the name claim, cleaned; may be empty
	// Admin is what the admin claim says, or nil when none is configured.
	Admin *bool
}

// JWTVerifier checks a host app's JWTs. It is safe for concurrent use.
type JWTVerifier struct {
	cfg    JWTConfig
	parser *jwt.Parser
	jwks   keyfunc.Keyfunc // nil with static keys
}

// NewJWTVerifier returns a verifier. With a JWK Set URL it fetches the set
// once before returning (a failure is logged, not fatal: the provider may
// come up after ferry) and refetches it until ctx ends.
func NewJWTVerifier(ctx context.Context, cfg JWTConfig) (*JWTVerifier, error) {
	if cfg.Issuer == "" || cfg.Audience == "" || (cfg.JWKSURL == "") == (len(cfg.Keys) == 0) {
		return nil, errors.New("users: a JWT verifier needs an issuer, an audience, and a JWKS URL or keys")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	v := &JWTVerifier{cfg: cfg, parser: jwt.NewParser(
		jwt.WithValidMethods(Algorithms),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithLeeway(JWTLeeway),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(cfg.Now),
	)}
	if cfg.JWKSURL == "" {
		return v, nil
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	refreshUnknown := orDefault(cfg.RefreshUnknownKID, time.Minute)
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
		Client:      &c,
		HTTPTimeout: 10 * time.Second,
		// A request with an unknown kid waits this long at most for the
		// once-a-minute refetch, and the refetch itself runs within it;
		// past it, the token is refused at once as signed by an unknown key.
		RateLimitWaitMax:  5 * time.Second,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(refreshUnknown), 1),
		RefreshInterval:   orDefault(cfg.RefreshEvery, time.Hour),
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(ctx context.Context, err error) {
				cfg.Log.WarnContext(ctx, "jwks fetch failed", "url", u, "err", err)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("users: jwks %s: %w", cfg.JWKSURL, err)
	}
	v.jwks = kf
	return v, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Issuer is the issuer whose tokens v accepts.
func (v *JWTVerifier) Issuer() string { return v.cfg.Issuer }

// LooksLikeJWT reports whether a bearer credential is shaped like a JWS
// in compact form, as ferry's own tokens and keys never are.
func LooksLikeJWT(tok string) bool {
	return strings.Count(tok, ".") == 2 && !strings.HasPrefix(tok, TokenPrefix) && !strings.HasPrefix(tok, ServiceKeyPrefix)
}

func jwtError(code, format string, args ...any) *errkind.Error {
	return errkind.New(errkind.Unauthenticated, code, format, args...)
}

var (
	errJWTMalformed  = jwtError("jwt_malformed", "the bearer token is not a well-formed JWT")
	errJWTAlgorithm  = jwtError("jwt_bad_algorithm", "the token's alg is not one ferry accepts (%s)", strings.Join(Algorithms, ", "))
	errJWTUnknownKey = jwtError("jwt_unknown_key", "the token is signed with a key the issuer does not publish")
	errJWTSignature  = jwtError("jwt_bad_signature", "the token's signature does not verify")
	errJWTIssuer     = jwtError("jwt_wrong_issuer", "the token's iss is not the issuer ferry trusts")
	errJWTAudience   = jwtError("jwt_wrong_audience", "the token's aud does not name ferry's audience")
	errJWTExpired    = jwtError("jwt_expired", "the token has expired")
	errJWTNotYet     = jwtError("jwt_not_yet_valid", "the token is not valid yet (nbf or iat in the future)")
	errJWTNoExpiry   = jwtError("jwt_no_expiry", "the token has no exp claim; ferry accepts only tokens that expire")
	errJWTClaims     = jwtError("jwt_bad_claims", "the token's claims are not of the types JWT defines")
	errJWTNoSubject  = jwtError("jwt_no_subject", "the token has no sub claim (a string of 1 to 255 bytes)")
	// errJWKSUnavailable is a 503: no key was ever fetched, so every token
	// would be refused for the provider's outage, not for itself.
	errJWKSUnavailable = errkind.New(errkind.Unavailable, "jwks_unavailable", "the identity provider's keys could not be fetched")
	// errNoKeyForAlg: FERRY_JWT_KEYS has no key of the token's algorithm.
	errNoKeyForAlg = errors.New("no configured key for this algorithm")
)

// Verify checks a JWT and returns who it names. Every refusal is an
// Unauthenticated *errkind.Error whose code says why. Nothing is written:
// the caller turns the identity into a user.
func (v *JWTVerifier) Verify(ctx context.Context, raw string) (Identity, error) {
	if len(raw) > maxJWT {
		return Identity{}, errJWTMalformed
	}
	claims := jwt.MapClaims{}
	tok, err := v.parser.ParseWithClaims(raw, claims, v.keyfunc(ctx))
	if err != nil {
		return Identity{}, v.classify(ctx, tok, claims, err)
	}
	sub, _ := claims.GetSubject()
	if sub == "" || len(sub) > 255 {
		return Identity{}, errJWTNoSubject
	}
	id := Identity{Issuer: v.cfg.Issuer, Subject: sub}
	if name, ok := claims["name"].(string); ok {
		id.Name = cleanName(name)
	}
	if v.cfg.AdminClaim != "" {
		admin := claims[v.cfg.AdminClaim] == true
		id.Admin = &admin
	}
	return id, nil
}

func (v *JWTVerifier) keyfunc(ctx context.Context) jwt.Keyfunc {
	if v.jwks != nil {
		return v.jwks.KeyfuncCtx(ctx)
	}
	return func(t *jwt.Token) (any, error) {
		// PEM keys carry no kid: the token is tried against each key of
		// its algorithm's type.
		var set jwt.VerificationKeySet
		for _, k := range v.cfg.Keys {
			if keyFits(t.Method.Alg(), k) {
				set.Keys = append(set.Keys, k)
			}
		}
		if len(set.Keys) == 0 {
			return nil, errNoKeyForAlg
		}
		return set, nil
	}
}

func keyFits(alg string, k crypto.PublicKey) bool {
	switch k.(type) {
	case *rsa.PublicKey:
		return alg == "RS256"
	case *ecdsa.PublicKey:
		return alg == "ES256"
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// classify turns golang-jwt's error into ferry's. The library checks in
// this order: form, algorithm, key, signature, claims; so a claim is only
// ever judged on a token whose signature held.
func (v *JWTVerifier) classify(ctx context.Context, tok *jwt.Token, claims jwt.MapClaims, err error) error {
	if errors.Is(err, jwt.ErrTokenMalformed) {
		return errJWTMalformed
	}
	if tok != nil {
		if alg, _ := tok.Header["alg"].(string); !slices.Contains(Algorithms, alg) {
			return errJWTAlgorithm
		}
	}
	switch {
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		// Unknown kids, a JWK whose alg differs from the token's, a refetch
		// the once-a-minute limit refused: all "no key for this token".
		if v.jwks != nil && !v.haveKeys(ctx) {
			return errJWKSUnavailable
		}
		return errJWTUnknownKey
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return errJWTSignature
	}
	iss, _ := claims["iss"].(string)
	aud, _ := claims.GetAudience()
	switch {
	case errors.Is(err, jwt.ErrTokenInvalidIssuer) || iss == "":
		return errJWTIssuer
	case errors.Is(err, jwt.ErrTokenInvalidAudience) || len(aud) == 0:
		return errJWTAudience
	case errors.Is(err, jwt.ErrTokenExpired):
		return errJWTExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet) || errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return errJWTNotYet
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return errJWTNoExpiry
	}
	return errJWTClaims
}

// haveKeys reports whether the JWK Set was ever fetched with a key in it.
func (v *JWTVerifier) haveKeys(ctx context.Context) bool {
	keys, err := v.jwks.Storage().KeyReadAll(ctx)
	return err == nil && len(keys) > 0
}

// cleanName makes a name claim fit for display: valid UTF-8 without
// control characters, at most 128 characters.
func cleanName(s string) string {
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	for utf8.RuneCountInString(s) > 128 {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}
