"""A server interceptor: a unary request that does not decode is answered INVALID_ARGUMENT.

Without it grpc.aio answers UNKNOWN ("Unexpected <class DecodeError>") and logs a traceback: the generated
handlers deserialize the request before any servicer code can look at it (found by
tests/integration/node/test_node_fuzz.py). Streaming requests are read by the servicers themselves, which
answer a bad message on their own.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

import grpc

_BAD = object()


class DecodeGuard(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        decode, behaviour = handler.request_deserializer, handler.unary_unary

        def safe(data: bytes) -> Any:
            try:
                return decode(data)
            except Exception:      # DecodeError and whatever else a parser may raise on hostile bytes
                return _BAD

        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if request is _BAD:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"the request is not a valid {details.method.rsplit('/', 1)[-1]} request message")
            return await behaviour(request, context)

        return grpc.unary_unary_rpc_method_handler(guarded, request_deserializer=safe,
                                                   response_serializer=handler.response_serializer)
