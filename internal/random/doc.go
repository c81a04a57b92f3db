// Package random gives ferry its random bytes for secrets, tokens and ids.
//
// crypto/rand.Read never returns an error since Go 1.24: on a platform
// where the kernel's generator fails it crashes the program, which is what
// a service whose every credential depends on it should do. So nothing
// here returns an error, and no caller needs a branch that cannot run.
package random
