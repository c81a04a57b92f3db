// Package chattest holds test doubles for the interfaces package chat
// consumes from other features, and a fast writer of chat history for
// tests that need a lot of it.
package chattest
