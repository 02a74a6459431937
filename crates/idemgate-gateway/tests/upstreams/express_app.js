// Express on Node: an upstream of the differential path test
// (crates/idemgate-gateway/tests/integration/differential.rs), with Express's default
// routing (case-insensitive, a trailing slash ignored).
//
// POST /charges and POST /a/charges each count one execution under the route Express
// matched. Every POST that reaches the application, routed or not, is recorded first as an
// arrival with its request target as received. GET /counts returns both and the versions.
//
//     NODE_PATH=<node_modules with express> node express_app.js PORT
'use strict';

const express = require('express');

const app = express();
const executions = {};
const arrivals = [];

app.use((req, res, next) => {
  if (req.method === 'POST') arrivals.push(req.originalUrl);
  next();
});

function execute(req, res) {
  const route = req.route.path;
  executions[route] = (executions[route] || 0) + 1;
  res.status(201).json({ executed: route });
}

app.post('/charges', execute);
app.post('/a/charges', execute);

app.get('/counts', (req, res) => {
  const server = `Express ${require('express/package.json').version}, Node ${process.version}`;
  res.json({ executions, arrivals, server });
});

const port = Number(process.argv[2]);
app.listen(port, '127.0.0.1');
