from rest_framework.pagination import LimitOffsetPagination


class ApiPagination(LimitOffsetPagination):
    """``?limit=&offset=``; 50 items by default, never more than 200 in one page."""

    default_limit = 50
    max_limit = 200
