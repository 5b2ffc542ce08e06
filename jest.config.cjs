const { availableParallelism } = require('node:os');

/** Jest runs the TypeScript sources through swc (no type check; `npm run typecheck` does that). */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/bench/'],
  transform: { '^.+\\.(t|j)sx?$': ['@swc/jest'] },
  // fhir-kit-client ships ESM only; let swc turn it into CommonJS for Jest.
  moduleNameMapper: {
    '^fhir-kit-client$': '<rootDir>/node_modules/fhir-kit-client/dist/index.js',
    // README examples import the package by name; in tests that is the source.
    '^dental-eligibility-sync$': '<rootDir>/src/index.ts',
    // Lazy imports name the built file (node16 resolution); in tests that is the source beside it.
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
  transformIgnorePatterns: ['/node_modules/(?!fhir-kit-client/)'],
  testTimeout: 20000,
  // Half the cores, as Jest's default, but never fewer than two workers: most suites spend their
  // time waiting on sockets, timers and child processes, and one worker on a 2-core machine (CI's)
  // left the second core idle for most of the run.
  maxWorkers: Math.max(2, Math.floor(availableParallelism() / 2)),
  // Every log line the suite writes is kept and searched for patient data and secrets (test/hardening/).
  setupFiles: ['<rootDir>/test/hardening/log-capture.ts'],
  globalSetup: '<rootDir>/test/hardening/log-scan.setup.ts',
  globalTeardown: '<rootDir>/test/hardening/log-scan.teardown.ts',
};
