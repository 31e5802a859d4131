from django.db import models


class Order(models.Model):
    email = models.EmailField()
    status = models.CharField(max_length=20, default="new")
    confirmed_by = models.CharField(max_length=100, blank=True, default="")
