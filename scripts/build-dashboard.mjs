#!/usr/bin/env node
// Builds the operators' dashboard (web/dashboard) into one directory: index.html, app.js (the page's
// TypeScript and uPlot, bundled by esbuild) and app.css. The api serves that directory at /dashboard.
// Usage: node scripts/build-dashboard.mjs [out-dir]   (default dist/dashboard)
import { copyFileSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = resolve(root, process.argv[2] ?? 'dist/dashboard');

mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: join(root, 'web/dashboard/src/main.ts') },
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['chrome100', 'firefox100', 'safari15'],
  outdir: out,
  logLevel: 'warning',
  // No source maps: the page's CSP and size stay simple; the sources are in the repository.
  sourcemap: false,
});
copyFileSync(join(root, 'web/dashboard/src/index.html'), join(out, 'index.html'));
