"""A request id on every request: taken from a trusted proxy's X-Request-Id or made here,
bound for the request's log lines and the tasks it sends, and returned as X-Request-Id."""

from __future__ import annotations

import logging

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from gpurental import logs

log = logging.getLogger("gpurental.request")


class RequestIdMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def _ids(self, request) -> str:
        rid = logs.clean_request_id(request.headers.get(logs.REQUEST_ID_HEADER))
        return rid or logs.new_request_id()

    def _done(self, request, response, rid: str):
        response[logs.REQUEST_ID_HEADER] = rid
        log.info("%s %s %s", request.method, request.path, response.status_code)
        return response

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        rid = self._ids(request)
        request.request_id = rid
        with logs.bound(request_id=rid, instance_id=None):
            return self._done(request, self.get_response(request), rid)

    async def __acall__(self, request):
        rid = self._ids(request)
        request.request_id = rid
        with logs.bound(request_id=rid, instance_id=None):
            return self._done(request, await self.get_response(request), rid)

    def process_view(self, request, view_func, view_args, view_kwargs):
        # A URL about one instance: its lines carry the id from the start.
        iid = view_kwargs.get("instance_id")
        if iid is not None:
            logs.bind(instance_id=str(iid))
