// Jest runs every test from the TypeScript sources (SWC transpiles them as they load), in three tiers:
//   unit    *.spec.ts beside the code: no I/O;
//   medium  test/medium/**/*.medium-spec.ts: Nest services and controllers built with @nestjs/testing
//           on the real Postgres and Redis;
//   e2e     test/**/*.e2e-spec.ts: real api, dispatcher, device and CLI processes.
// The medium and e2e tiers share a global setup (test/jest/global-setup.ts) that claims a Postgres
// database and a Redis database of this run's own, so that runs in parallel never meet.

/**
 * SWC as Nest needs it: legacy decorators with their metadata (constructor injection by type). It
 * also resolves the @app/common alias itself (as test/jest/transpile.ts does), so that the global
 * setup, which Jest loads without its module map, can load code that imports it.
 */
const swc = [
  '@swc/jest',
  {
    jsc: {
      parser: { syntax: 'typescript', decorators: true },
      transform: { legacyDecorator: true, decoratorMetadata: true },
      target: 'es2022',
      keepClassNames: true,
      baseUrl: import.meta.dirname,
      paths: { '@app/common': ['libs/common/src'], '@app/common/*': ['libs/common/src/*'] },
    },
    module: { type: 'commonjs' },
    sourceMaps: 'inline',
  },
];

const common = {
  rootDir: import.meta.dirname,
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': swc },
  moduleNameMapper: {
    '^@app/common$': '<rootDir>/libs/common/src',
    '^@app/common/(.*)$': '<rootDir>/libs/common/src/$1',
  },
  modulePathIgnorePatterns: ['<rootDir>/dist/', '<rootDir>/node_modules/.cache/'],
};

/**
 * TEST_TIER=unit|medium|e2e runs one tier (the npm scripts test:unit, test:medium and test:e2e set
 * it); unlike --selectProjects, it leaves the command line free for file patterns.
 */
const tier = process.env.TEST_TIER;

/** @type {import('jest').Config} */
export default {
  // One suite at a time: each e2e suite runs several processes of its own (apis, dispatchers, devices,
  // runtimes), and two of them at once on two cores starve each other's processes of CPU, which turns
  // waits that hold on any quiet machine into races (a device slower to answer than a queue timeout).
  maxWorkers: 1,
  // The slowest suites report as such, with their time.
  verbose: false,
  projects: [
    {
      ...common,
      displayName: 'unit',
      testMatch: ['<rootDir>/{apps,libs,bench,tools}/**/*.spec.ts'],
      setupFilesAfterEnv: ['<rootDir>/test/jest/unit.setup.ts'],
    },
    {
      ...common,
      displayName: 'medium',
      testMatch: ['<rootDir>/test/medium/**/*.medium-spec.ts'],
      globalSetup: '<rootDir>/test/jest/global-setup.ts',
      globalTeardown: '<rootDir>/test/jest/global-teardown.ts',
      setupFilesAfterEnv: ['<rootDir>/test/jest/medium.setup.ts'],
    },
    {
      ...common,
      displayName: 'e2e',
      testMatch: ['<rootDir>/test/**/*.e2e-spec.ts'],
      globalSetup: '<rootDir>/test/jest/global-setup-e2e.ts',
      globalTeardown: '<rootDir>/test/jest/global-teardown.ts',
      setupFilesAfterEnv: ['<rootDir>/test/jest/e2e.setup.ts'],
    },
  ].filter((project) => !tier || tier.split(',').includes(project.displayName)),
};
