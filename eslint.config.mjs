import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { moduleBoundaries } from './scripts/module-boundaries.mjs';

/*
 * The module arrows of docs/architecture.md ("Modules"), enforced: an import the wrong way fails
 * `npm run lint`. A scope is a folder whose sub-folders are modules; each module names the sibling
 * modules it may import (its own files aside), besides the scope's `shared` ones, which every module
 * may import and which import none. Nothing imports a scope's composition files. A folder of a scope
 * that is not on its map fails lint, so that a new module is placed on the map (and in the docs) when
 * it is made; unless the scope gives `otherModules`, what any folder not named may import.
 */
const MODULE_SCOPES = [
  {
    root: 'apps/api/src',
    composition: ['main', 'app.module', 'bootstrap'],
    // common/ (error bodies, validation, route discovery, background jobs) imports nothing of the app: anything may use it.
    shared: ['common'],
    modules: {
      admin: ['auth', 'openapi', 'tasks'],
      auth: ['keys', 'limits', 'metrics'],
      common: [],
      completions: ['auth', 'intake', 'openapi', 'queue', 'responder'],
      dashboard: ['auth', 'openapi'],
      embeddings: ['auth', 'flight', 'intake', 'limits', 'models', 'openapi'],
      flight: ['limits', 'metrics', 'queue'],
      infra: ['auth', 'metrics', 'openapi'],
      intake: ['auth', 'flight', 'limits', 'models', 'queue'],
      keys: [],
      limits: ['metrics'],
      metrics: [],
      models: ['auth', 'openapi'],
      ollama: ['auth', 'embeddings', 'intake', 'models', 'openapi', 'responder'],
      openapi: ['auth'],
      opengpu: ['auth', 'completions', 'ollama', 'openapi'],
      queue: [],
      responder: ['flight'],
      tasks: ['auth', 'openapi', 'queue'],
      usage: ['auth', 'keys', 'limits', 'openapi', 'tasks'],
    },
  },
  {
    // The admin API's resources (orgs/, keys/, models/, devices/, fleet/, and any added) stand side by
    // side: each imports only admin's own files (list.ts), never another resource's.
    root: 'apps/api/src/admin',
    composition: ['admin.module'],
    modules: {},
    otherModules: [],
  },
  {
    root: 'apps/dispatcher/src',
    composition: ['main', 'app.module'],
    shared: ['infra'],
    modules: {
      canaries: ['devices', 'dispatch', 'relay'],
      devices: [],
      dispatch: ['devices', 'queues', 'relay'],
      infra: [],
      queues: [],
      relay: [],
      tasks: ['queues'],
    },
  },
];

/**
 * Folders that no relative import leaves: each app's sources (apps never import each other; they
 * reach libs/common through `@app/common`, or by its path where the alias is not mapped, as in the
 * files the test run's global setup loads) and libs/common's (which imports no app).
 */
const SEALED = [
  ...readdirSync(join(import.meta.dirname, 'apps')).map((app) => ({
    root: `apps/${app}/src`,
    except: 'libs/common/src',
    why: 'apps never import each other',
  })),
  { root: 'libs/common/src', why: 'libs/common imports no app' },
];

export default tseslint.config(
  {
    ignores: [
      'dist/**',
      'node_modules/**',
      'libs/common/src/prisma/generated/**',
      'eslint.config.mjs',
      'scripts/**',
      'prisma.config.ts',
      'jest.config.mjs',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/switch-exhaustiveness-check': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { disallowTypeAnnotations: false }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-extraneous-class': 'off',
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      curly: ['error', 'all'],
    },
  },
  {
    // Tests read untyped JSON bodies from the wire; `any` there is the honest type.
    files: ['test/**/*.ts', '**/*.spec.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
      // One assertion style in tests: Jest's expect. (The typescript-eslint rule, not the core
      // no-restricted-imports, which the module boundaries below set per folder and would replace.)
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: ['assert', 'assert/strict', 'node:assert', 'node:assert/strict'].map((name) => ({
            name,
            message: "Tests assert with Jest's expect (toBe, toEqual, toMatch, rejects…), not node:assert.",
          })),
        },
      ],
    },
  },
  ...moduleBoundaries(import.meta.dirname, MODULE_SCOPES, SEALED),
);
