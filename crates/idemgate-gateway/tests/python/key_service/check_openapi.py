"""Validates the key service's OpenAPI document (openapi-spec-validator, OpenAPI 3.1).

Usage: python check_openapi.py BASE_URL
"""

import sys

import requests
from openapi_spec_validator import validate
from openapi_spec_validator.validation.validators import OpenAPIV31SpecValidator

doc = requests.get(sys.argv[1] + "/v1/openapi.json", timeout=10).json()
assert doc["openapi"].startswith("3.1."), doc["openapi"]
validate(doc, cls=OpenAPIV31SpecValidator)
paths = sorted(doc["paths"])
for want in ["/v1/acquire", "/v1/renew", "/v1/complete", "/v1/fail", "/v1/release", "/v1/records"]:
    assert want in paths, (want, paths)
print(f"valid OpenAPI {doc['openapi']}: {len(paths)} paths")
