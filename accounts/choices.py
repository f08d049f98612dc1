from django.db import models


class Role(models.TextChoices):
    STUDENT = "student", "Student"
    ADMIN = "admin", "Admin"
