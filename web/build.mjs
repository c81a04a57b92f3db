// Builds dist/ from src/: the UI (app.js), the SDK for other pages
// (ferry.js) and the hashing worker (hash-worker.js), as ES modules.
// The output is committed and embedded in the ferry binary; CI rebuilds it
// and fails if it differs from what is committed.
import { build } from 'esbuild'

await build({
  entryPoints: { app: 'src/app.js', ferry: 'src/ferry.js', 'hash-worker': 'src/hash-worker.js' },
  outdir: 'dist',
  bundle: true,
  format: 'esm',
  target: ['es2022'],
  minify: true,
  legalComments: 'eof',
  charset: 'utf8',
  logLevel: 'warning',
})
