package upload

import "context"

// VerifyObject exposes the merge's verification read to benchmarks, so
// they can time it against a plain GetObject of the same object.
func (s *Service) VerifyObject(ctx context.Context, key string) (string, int64, error) {
	return s.verifyObject(ctx, key, "")
}
