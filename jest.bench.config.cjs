/** Benchmarks: `npm run bench`. Not part of `npm test`; they print figures, they do not gate. One at a time, so they do not compete for the cores. */
const base = require('./jest.config.cjs');
module.exports = { ...base, roots: ['<rootDir>/test/bench'], testMatch: ['**/*.bench.ts'], testPathIgnorePatterns: ['/node_modules/'], testTimeout: 300000, maxWorkers: 1 };
