package upload

import (
	"context"

	"github.com/ferry-io/ferry/jobs"
)

// VerifyChunk is how many bytes verification reads between its progress
// reports, so tests can count the reports a file makes.
const VerifyChunk = verifyChunk

// VerifyObject exposes the merge's verification read to benchmarks, so
// they can time it against a plain GetObject of the same object.
func (s *Service) VerifyObject(ctx context.Context, key string) (string, int64, error) {
	v, n, err := s.verifyObject(ctx, key, "", "")
	return v.sum, n, err
}

// AdoptNow runs the adoption job of a POST-policy upload at once, instead
// of after its policy expired.
func (s *Service) AdoptNow(ctx context.Context, id string) error {
	return s.adopt(ctx, &jobs.Job{Kind: KindAdopt, Key: id})
}
