#!/usr/bin/env node
'use strict';
// The CLI runs from the compiled output; `npm ci` builds it through the `prepare` script.
const { main } = require('../dist/cli/main.js');
main();
